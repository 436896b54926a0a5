"""Brute-force limits on every sign-in: the login page, the admin's and the
token endpoint. After AXES_FAILURE_LIMIT failures for one username, or from
one address, further attempts are refused (even with the right password) for
AXES_COOLOFF_TIME: a friendly page or the API's 429 envelope, with
``Retry-After``. Attempts are counted in PostgreSQL, so the limits hold with
Redis down."""

from collections.abc import Iterator
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.test import Client, override_settings
from rest_framework.test import APIClient

from config.settings.base import _redis_cache
from core.breaker import reset_breakers
from tests.factories import StaffFactory, UserFactory

pytestmark = pytest.mark.django_db

PASSWORD = "pass-1234"  # tests.factories' password


def _limit() -> int:
    return int(settings.AXES_FAILURE_LIMIT)


def _retry_after() -> str:
    return str(int(settings.AXES_COOLOFF_TIME.total_seconds()))


def page_login(path: str, username: str, password: str, ip: str = "10.0.0.1") -> Any:
    return Client().post(path, {"username": username, "password": password}, REMOTE_ADDR=ip)


def token_login(username: str, password: str, ip: str = "10.0.0.1") -> Any:
    return APIClient().post(
        "/api/v1/auth/token/", {"username": username, "password": password}, format="json", REMOTE_ADDR=ip
    )


def assert_locked_page(response: Any) -> None:
    assert response.status_code == 429, response.content[:300]
    assert b"Too many sign-in attempts" in response.content
    assert response["Retry-After"] == _retry_after()


def assert_locked_envelope(response: Any) -> None:
    assert response.status_code == 429, response.content[:300]
    assert response.json()["error"]["code"] == "throttled"
    assert response["Retry-After"] == _retry_after()


@pytest.fixture
def dead_redis() -> Iterator[None]:
    # Django's cache (sessions' cache layer, throttles) on a port that refuses.
    with override_settings(CACHES={**settings.CACHES, "default": _redis_cache("redis://127.0.0.1:1/0")}):
        reset_breakers()
        yield
    reset_breakers()


def test_the_limits_are_configured() -> None:
    assert _limit() == 5
    assert settings.AXES_COOLOFF_TIME.total_seconds() == 15 * 60
    assert settings.AXES_LOCKOUT_PARAMETERS == ["username", "ip_address"]


@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/"])
def test_a_username_is_locked_after_the_limit_even_with_the_right_password(path: str) -> None:
    StaffFactory(username="alice")
    for attempt in range(_limit() - 1):
        response = page_login(path, "alice", "wrong", ip=f"10.0.1.{attempt}")
        assert response.status_code == 200  # the form again, with its error
    # The last allowed failure, from yet another address, reaches the limit for the username.
    assert_locked_page(page_login(path, "alice", "wrong", ip="10.0.2.1"))
    assert_locked_page(page_login(path, "alice", PASSWORD, ip="10.0.3.1"))
    assert AccessAttempt.objects.filter(username="alice").exists()
    # Another account, from a fresh address, signs in as usual.
    UserFactory(username="bob")
    assert page_login("/accounts/login/", "bob", PASSWORD, ip="10.0.4.1").status_code == 302


def test_an_address_is_locked_after_the_limit_whatever_the_username() -> None:
    UserFactory(username="carol")
    for attempt in range(_limit() - 1):
        assert page_login("/accounts/login/", f"guess-{attempt}", "wrong", ip="10.9.9.9").status_code == 200
    assert_locked_page(page_login("/accounts/login/", "guess-last", "wrong", ip="10.9.9.9"))
    # Carol's right password from that address is refused too; from her own it works.
    assert_locked_page(page_login("/accounts/login/", "carol", PASSWORD, ip="10.9.9.9"))
    assert page_login("/accounts/login/", "carol", PASSWORD, ip="10.8.8.8").status_code == 302


def test_the_token_endpoint_is_limited_with_the_envelope() -> None:
    UserFactory(username="dave")
    for attempt in range(_limit() - 1):
        response = token_login("dave", "wrong", ip=f"10.0.5.{attempt}")
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "invalid"
    assert_locked_envelope(token_login("dave", "wrong", ip="10.0.6.1"))
    assert_locked_envelope(token_login("dave", PASSWORD, ip="10.0.6.2"))
    assert "token" not in token_login("dave", PASSWORD, ip="10.0.6.3").json()


def test_a_sign_in_before_the_limit_resets_the_count() -> None:
    UserFactory(username="erin")
    for _ in range(_limit() - 1):
        assert page_login("/accounts/login/", "erin", "wrong").status_code == 200
    assert page_login("/accounts/login/", "erin", PASSWORD).status_code == 302
    for _ in range(_limit() - 1):
        assert page_login("/accounts/login/", "erin", "wrong").status_code == 200
    assert page_login("/accounts/login/", "erin", PASSWORD).status_code == 302


@pytest.mark.usefixtures("dead_redis")
def test_the_limits_hold_with_redis_down() -> None:
    UserFactory(username="frank")
    for attempt in range(_limit() - 1):
        assert page_login("/accounts/login/", "frank", "wrong", ip=f"10.1.0.{attempt}").status_code == 200
    assert_locked_page(page_login("/accounts/login/", "frank", "wrong", ip="10.1.1.1"))
    assert_locked_envelope(token_login("frank", PASSWORD, ip="10.1.1.2"))
    assert AccessAttempt.objects.filter(username="frank").count() >= 1
