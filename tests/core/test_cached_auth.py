"""Credential lookups are cached (no SQL per request) yet revocation is immediate."""

from typing import Any

import pytest
from django.test import Client
from rest_framework.authtoken.models import Token

from core import keys
from tests.conftest import assert_error, client_for
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_token_requests_run_no_sql_once_cached(recipient: Any, django_assert_num_queries: Any) -> None:
    client = client_for(recipient)
    assert client.get("/api/v1/me/").status_code == 200  # fills the caches
    with django_assert_num_queries(0):
        response = client.get("/api/v1/me/")
    assert response.json() == {"id": str(recipient.pk), "username": "alice", "is_staff": False, "platforms": ["user"]}


def test_deleted_token_stops_working_at_once(recipient: Any) -> None:
    client = client_for(recipient)
    assert client.get("/api/v1/me/").status_code == 200
    Token.objects.filter(user=recipient).delete()
    assert_error(client.get("/api/v1/me/"), 401, "authentication_failed")


def test_deactivated_user_stops_working_at_once(recipient: Any, redis: Any) -> None:
    client = client_for(recipient)
    assert client.get("/api/v1/me/").status_code == 200
    assert redis.exists(keys.auth_user(recipient.pk))
    recipient.is_active = False
    recipient.save()
    assert not redis.exists(keys.auth_user(recipient.pk))
    assert_error(client.get("/api/v1/me/"), 401, "authentication_failed")


def test_deleted_user_stops_working_at_once(recipient: Any) -> None:
    client = client_for(recipient)
    assert client.get("/api/v1/me/").status_code == 200
    recipient.delete()
    assert_error(client.get("/api/v1/me/"), 401)


def test_session_requests_run_no_sql_once_cached(django_assert_num_queries: Any) -> None:
    UserFactory(username="sam")
    browser = Client()
    assert browser.login(username="sam", password="pass-1234")
    assert browser.get("/api/v1/me/").status_code == 200
    with django_assert_num_queries(0):
        assert browser.get("/api/v1/me/").json()["username"] == "sam"


def test_logged_out_session_stops_working_at_once() -> None:
    UserFactory(username="sam")
    browser = Client()
    assert browser.login(username="sam", password="pass-1234")
    stolen = browser.cookies["sessionid"].value
    browser.logout()
    thief = Client()
    thief.cookies["sessionid"] = stolen
    assert_error(thief.get("/api/v1/me/"), 401, "not_authenticated")


def test_password_change_ends_other_sessions() -> None:
    user = UserFactory(username="sam")
    browser = Client()
    assert browser.login(username="sam", password="pass-1234")
    assert browser.get("/api/v1/me/").status_code == 200
    user.set_password("another-pass-5678")
    user.save()
    assert browser.get("/api/v1/me/").status_code in {401, 403}


def test_platform_change_reaches_the_next_request_at_once(recipient: Any, operator_client: Any) -> None:
    client = client_for(recipient)
    assert client.get("/api/v1/me/").json()["platforms"] == ["user"]  # cached snapshot carries platforms
    response = operator_client.put(
        f"/api/v1/manage/users/{recipient.pk}/platforms/", {"platforms": ["customer"]}, format="json"
    )
    assert response.status_code == 200
    assert client.get("/api/v1/me/").json()["platforms"] == ["customer"]
