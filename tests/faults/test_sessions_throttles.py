"""Sessions, authentication and throttling with Django's cache on a dead Redis.

Django's cache (sessions' cache layer, DRF throttles) is pointed at a Redis
that refuses connections, or one that accepts them and never answers (a hung
server). Then:

- a user logs in through the login page: the session is created anyway, in
  PostgreSQL (``cached_db``; cache-only sessions cannot even be created with
  Redis down, FACTS.md), stays valid across requests, and logs out;
- token API calls still authenticate (accounts/authentication.py falls back to
  PostgreSQL when the token cache raises);
- DRF throttling never turns into a 5xx: its window lives in Django's cache,
  which fails open (``IGNORE_EXCEPTIONS``), so while Redis is down nobody is
  throttled;
- every request stays well under a second: short socket timeouts, and the
  circuit breaker makes every call after the first failure fail at once.

On the cluster pass the read model is on the cluster and only the cache is
dead; everything above must hold the same.
"""

import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.contrib.sessions.models import Session
from django.core.cache import cache
from django.test import Client, override_settings
from django.urls import reverse
from rest_framework.test import APIClient

from config.settings.base import _redis_cache
from core.breaker import reset_breakers
from core.local_cache import local_caches_clear
from tests.conftest import client_for
from tests.factories import UserFactory
from tests.fixtures.throttles import throttle_rates

pytestmark = pytest.mark.django_db(transaction=True)

# Well under a second: one socket timeout (REDIS_SOCKET_TIMEOUT, 0.5 s) at most,
# paid by the first call that meets the dead server; the breaker then fails the rest at once.
REQUEST_BUDGET = 0.9


@pytest.fixture
def hung_port() -> Iterator[int]:
    """A port that accepts TCP connections (the kernel's backlog) and never answers."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()


@pytest.fixture(params=["refused", "hung"])
def dead_cache(request: pytest.FixtureRequest) -> Iterator[str]:
    """Django's cache (and, off the cluster, the read model with it) on a dead Redis."""
    if request.param == "refused":
        url = "redis://127.0.0.1:1/0"
    else:
        url = f"redis://127.0.0.1:{request.getfixturevalue('hung_port')}/0"
    # Django drops its cache handlers on a CACHES change: the new alias is used at once.
    with override_settings(CACHES={**settings.CACHES, "default": _redis_cache(url)}):
        reset_breakers()
        local_caches_clear()
        yield request.param
    reset_breakers()
    local_caches_clear()


def timed(call: Any, *args: Any, **kwargs: Any) -> Any:
    started = time.monotonic()
    response = call(*args, **kwargs)
    elapsed = time.monotonic() - started
    assert elapsed < REQUEST_BUDGET, f"{args[0] if args else call}: {elapsed:.2f}s"
    assert response.status_code < 500, response.content[:500]
    return response


@pytest.mark.usefixtures("dead_cache")
def test_the_cache_is_really_dead() -> None:
    # The premise: a cache write is swallowed and nothing can be read back.
    cache.set("probe", "1")
    assert cache.get("probe") is None


@pytest.mark.usefixtures("dead_cache")
def test_login_stay_logged_in_and_logout_through_the_pages() -> None:
    user = UserFactory(username="alice")
    client = Client()
    login = timed(client.get, reverse("login"))
    assert login.status_code == 200

    response = timed(client.post, reverse("login"), {"username": "alice", "password": "pass-1234"})
    assert response.status_code == 302, response.content[:500]
    # The session lives in PostgreSQL (cached_db), so it exists with the cache dead.
    key = client.cookies[settings.SESSION_COOKIE_NAME].value
    stored = Session.objects.get(session_key=key)
    assert str(stored.get_decoded()["_auth_user_id"]) == str(user.pk)

    for _ in range(3):  # each request loads the session from PostgreSQL again
        page = timed(client.get, reverse("messagecenter:inbox"))
        assert page.status_code == 200
        assert page.wsgi_request.user.pk == user.pk

    out = timed(client.post, reverse("logout"))
    assert out.status_code == 302
    assert not Session.objects.filter(session_key=key).exists()
    after = timed(client.get, reverse("messagecenter:inbox"))
    assert after.status_code == 302
    assert after["Location"].startswith(reverse("login"))


@pytest.mark.usefixtures("dead_cache")
def test_a_wrong_password_is_refused_not_crashed() -> None:
    UserFactory(username="alice")
    response = timed(Client().post, reverse("login"), {"username": "alice", "password": "wrong"})
    assert response.status_code == 200  # the form again, with its error
    assert not Session.objects.exists()


@pytest.mark.usefixtures("dead_cache")
def test_token_calls_authenticate_and_throttles_fail_open() -> None:
    user = UserFactory(username="alice")
    client = client_for(user)
    # Throttled on every call (DEFAULT_THROTTLE_CLASSES, the suite's generous
    # rates); with the cache dead the throttle sees no window: no 429 here, never a 5xx.
    for _ in range(5):
        response = timed(client.get, "/api/v1/inbox/counts/")
        assert response.status_code == 200, response.content
        assert set(response.json()) >= {"unread", "unseen"}
    listing = timed(client.get, "/api/v1/inbox/")
    assert listing.status_code == 200
    # A wrong token is still refused (PostgreSQL decides), with the envelope.
    stranger = APIClient()
    stranger.credentials(HTTP_AUTHORIZATION="Token " + "0" * 40)
    bad = timed(stranger.get, "/api/v1/inbox/counts/")
    assert bad.status_code == 401
    assert set(bad.json()) == {"error"}


STRICT = {"anon": "2/min", "user": "2/min"}


def _strict_statuses() -> list[int]:
    user = UserFactory(username="alice")
    client = client_for(user)
    with throttle_rates(STRICT, clients=(f"throttle_user_{user.pk}",)):
        return [timed(client.get, "/api/v1/inbox/counts/").status_code for _ in range(4)]


def test_strict_throttles_bite_with_a_live_cache() -> None:
    # The control: the suite's own cache counts, and the third call is refused.
    assert _strict_statuses() == [200, 200, 429, 429]


@pytest.mark.usefixtures("dead_cache")
def test_strict_throttles_fail_open_with_the_cache_dead() -> None:
    # DRF's throttle keeps its window in Django's cache; a dead cache reads as
    # an empty window and swallows the write, so every call is let through.
    assert _strict_statuses() == [200, 200, 200, 200]
