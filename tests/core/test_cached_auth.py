"""Credential lookups are cached (no SQL per request) yet revocation is immediate."""

from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from accounts import keys as account_keys
from accounts.models import ApiToken
from accounts.selectors import PLATFORMS_ATTR
from accounts.tokens import token_digest
from core import readmodel
from core.readthrough import parse
from core.redis import get_redis
from tests.conftest import assert_error, client_for, on_cluster
from tests.factories import UserFactory
from tests.fixtures.clients import token_for

pytestmark = pytest.mark.django_db(transaction=True)


def _client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def _entry(token: str) -> str:
    """The Redis key of the token's authentication entry (named by its digest)."""
    return account_keys.auth_token(token_digest(token))


def test_token_requests_run_no_sql_once_cached(recipient: Any, django_assert_num_queries: Any) -> None:
    client = client_for(recipient)
    assert client.get("/api/v1/me/").status_code == 200  # fills the caches
    with django_assert_num_queries(0):
        response = client.get("/api/v1/me/")
    assert response.json() == {"id": str(recipient.pk), "username": "alice", "is_staff": False, "platforms": ["user"]}


def test_deleted_token_stops_working_at_once(recipient: Any) -> None:
    client = client_for(recipient)
    assert client.get("/api/v1/me/").status_code == 200
    ApiToken.objects.filter(user=recipient).delete()
    assert_error(client.get("/api/v1/me/"), 401, "authentication_failed")


def test_deactivated_user_stops_working_at_once(recipient: Any, redis: Any) -> None:
    token = token_for(recipient)
    client = _client(token)
    assert client.get("/api/v1/me/").status_code == 200
    assert parse(redis.get(_entry(token))).found
    recipient.is_active = False
    recipient.save()
    assert not parse(redis.get(_entry(token))).found  # the copy kept under the token is invalidated too
    assert_error(client.get("/api/v1/me/"), 401, "authentication_failed")


def test_a_cached_token_costs_one_redis_command(recipient: Any, monkeypatch: Any) -> None:
    token = token_for(recipient)
    client = _client(token)
    assert client.get("/api/v1/me/").status_code == 200
    sent: list[tuple[Any, ...]] = []
    redis_client = get_redis()
    real_execute = redis_client.execute_command

    def execute(*args: Any, **kwargs: Any) -> Any:
        sent.append(args)
        return real_execute(*args, **kwargs)

    monkeypatch.setattr(redis_client, "execute_command", execute)
    assert client.get("/api/v1/me/").status_code == 200
    # The GET of the token entry (the platforms ride on the snapshot); the
    # rest is DRF's user throttle reading and writing its window in Django's cache.
    throttle = [args for args in sent if any("throttle" in str(arg) for arg in args)]
    auth = [args for args in sent if args not in throttle]
    assert auth == [("GET", _entry(token))]
    assert len(throttle) <= 2


def test_a_cold_token_costs_its_own_fill_and_nothing_nested(recipient: Any, redis: Any) -> None:
    """The first request with a token (or after a change dropped its entry):
    the entry's lookup, its fill lock and its store, around one query (the
    token, its user and their platforms) and, the token being new, the write
    of its "last used" time; not a fill of the platforms' own entry inside it."""
    from accounts.authentication import TokenAuthentication
    from tests.conftest import round_trips

    key = token_for(recipient)
    redis.delete(_entry(key), account_keys.user_platforms(recipient.pk))
    with round_trips() as trips, CaptureQueriesContext(connection) as queries:
        user, _token = TokenAuthentication().authenticate_credentials(key)
    assert user.pk == recipient.pk
    statements = [q["sql"] for q in queries.captured_queries]
    assert len(statements) == 2, statements
    read, write = statements
    assert read.startswith("SELECT"), read
    assert all(table in read for table in ("core_apitoken", "auth_user")), read
    assert write.startswith("UPDATE"), write
    assert all(name in write for name in ("core_apitoken", "last_used_at")), write
    assert getattr(user, PLATFORMS_ATTR) == ("user",)
    assert parse(redis.get(_entry(key))).found
    assert not redis.exists(account_keys.user_platforms(recipient.pk))
    if not on_cluster():  # round_trips counts a single Redis's pool
        assert trips[0] <= 4  # the three, and the user's first activity of the day


def test_user_changes_reach_token_requests_at_once(recipient: Any) -> None:
    client = client_for(recipient)
    assert client.get("/api/v1/me/").json()["username"] == "alice"
    recipient.username = "alice2"
    recipient.save()
    assert client.get("/api/v1/me/").json()["username"] == "alice2"


def test_a_revocation_racing_the_cache_fill_leaves_no_entry(recipient: Any, redis: Any, monkeypatch: Any) -> None:
    """The token is deleted (and its tombstone written) between the filler's
    read of PostgreSQL and its write to Redis: the fill finds an entry it did
    not see and stores nothing, so the revoked token fails on the next request."""
    token = token_for(recipient)
    client = _client(token)
    real_store = readmodel.cache_fill_store

    def store_after_revocation(**kwargs: Any) -> bool:
        ApiToken.objects.filter(digest=token_digest(token)).delete()  # commits and writes the tombstone first
        return real_store(**kwargs)  # then the stale fill lands

    monkeypatch.setattr(readmodel, "cache_fill_store", store_after_revocation)
    assert client.get("/api/v1/me/").status_code == 200  # this request had read the token before
    assert not parse(redis.get(_entry(token))).found
    monkeypatch.undo()
    assert_error(client.get("/api/v1/me/"), 401, "authentication_failed")


def test_a_user_change_racing_the_session_fill_leaves_no_entry(redis: Any, monkeypatch: Any) -> None:
    user = UserFactory(username="sam")
    browser = Client()
    assert browser.login(username="sam", password="pass-1234")
    redis.delete(account_keys.auth_user(user.pk))
    real_store = readmodel.cache_fill_store

    def store_after_deactivation(**kwargs: Any) -> bool:
        if kwargs["key"] == account_keys.auth_user(user.pk):
            fresh = type(user).objects.get(pk=user.pk)
            fresh.is_active = False
            fresh.save()  # commits; its receiver writes the tombstone
        return real_store(**kwargs)

    monkeypatch.setattr(readmodel, "cache_fill_store", store_after_deactivation)
    assert browser.get("/api/v1/me/").status_code == 200
    assert not parse(redis.get(account_keys.auth_user(user.pk))).found
    monkeypatch.undo()
    assert browser.get("/api/v1/me/").status_code in {401, 403}


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
