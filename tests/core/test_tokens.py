"""API tokens: a new token per sign-in, only its digest stored, expiry,
revocation one by one, and an end to every token on a password change or a
deactivation. On the real PostgreSQL and Redis (and the embedded pair)."""

import logging
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.apps import apps
from django.db import connection
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework.test import APIClient

from accounts import keys as account_keys
from accounts.models import ApiToken
from accounts.tokens import PREFIX, token_digest, token_issue, token_lifetime
from core.redis import get_redis
from tests.conftest import assert_error
from tests.factories import UserFactory
from tests.fixtures.readmodel import keyspace_scan

pytestmark = pytest.mark.django_db(transaction=True)

SIGN_IN = "/api/v1/auth/token/"
TOKENS = "/api/v1/me/tokens/"
ME = "/api/v1/me/"


def sign_in(username: str = "dora", password: str = "pass-1234") -> dict[str, Any]:  # noqa: S107
    response = APIClient().post(SIGN_IN, {"username": username, "password": password}, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def with_token(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def test_sign_in_issues_a_new_token_each_time() -> None:
    UserFactory(username="dora")
    first, second = sign_in(), sign_in()
    assert first["token"] != second["token"]
    assert first["token"].startswith(PREFIX)
    assert len(first["token"]) > 40
    for answer in (first, second):
        expires_at = parse_datetime(answer["expires_at"])
        assert expires_at is not None
        assert timezone.now() + token_lifetime() - timedelta(minutes=1) < expires_at
        assert expires_at <= timezone.now() + token_lifetime()
        # Each one works, and both at once.
        assert with_token(answer["token"]).get(ME).json()["username"] == "dora"


def test_token_never_stored_in_plaintext(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    user = UserFactory(username="dora")
    token = sign_in()["token"]
    client = with_token(token)
    # Requests that fill authentication's cache and the inbox's read model.
    for path in (ME, "/api/v1/inbox/", "/api/v1/inbox/counts/", TOKENS):
        assert client.get(path).status_code == 200
    assert ApiToken.objects.get(user=user).digest == token_digest(token)

    # No column of any table holds it (every table of every installed model, as text).
    tables = {model._meta.db_table for model in apps.get_models(include_auto_created=True)}
    with connection.cursor() as cursor:
        for table in sorted(tables & set(connection.introspection.table_names())):
            quoted = connection.ops.quote_name(table)
            cursor.execute(f"SELECT * FROM {quoted}")  # noqa: S608 - names from the app registry
            assert all(token not in repr(row) for row in cursor.fetchall()), table
    # ...nor any Redis key or string/hash value.
    for client_ in {id(c): c for c in (get_redis(), _cache_redis())}.values():
        for key in keyspace_scan(client_):
            name = key.decode() if isinstance(key, bytes) else key
            assert token not in name
            kind = client_.type(key)
            kind = kind.decode() if isinstance(kind, bytes) else kind
            if kind == "string":
                assert token.encode() not in (client_.get(key) or b"")
            elif kind == "hash":
                assert all(token.encode() not in bytes(v) for v in client_.hgetall(key).values())
    # ...nor a log line.
    assert all(token not in record.getMessage() for record in caplog.records)


def _cache_redis() -> Any:
    from django_redis import get_redis_connection

    return get_redis_connection("default")


def test_revoking_one_token_leaves_the_others() -> None:
    UserFactory(username="dora")
    kept, revoked = sign_in()["token"], sign_in()["token"]
    assert with_token(revoked).get(ME).status_code == 200  # cached as valid first
    response = with_token(revoked).delete(SIGN_IN)
    assert response.status_code == 204
    assert_error(with_token(revoked).get(ME), 401)
    assert_error(with_token(revoked).delete(SIGN_IN), 401)
    assert with_token(kept).get(ME).status_code == 200
    # Signing out needs a token: none, or a session, is a 401.
    assert_error(APIClient().delete(SIGN_IN), 401)


def test_tokens_list_and_other_users_404() -> None:
    dora = UserFactory(username="dora")
    UserFactory(username="eve")
    first, second = sign_in()["token"], sign_in()["token"]
    eves = sign_in("eve")["token"]
    listed = with_token(second).get(TOKENS)
    assert listed.status_code == 200
    results = listed.json()["results"]
    assert [row["current"] for row in results] == [True, False]  # newest first, the caller's own marked
    assert set(results[0]) == {"id", "created_at", "expires_at", "last_used_at", "current"}
    assert {row["id"] for row in results} == {
        str(pk) for pk in ApiToken.objects.filter(user=dora).values_list("pk", flat=True)
    }
    assert first not in listed.content.decode()
    assert second not in listed.content.decode()
    assert results[0]["last_used_at"] is not None  # the request itself used it

    eve_token_id = str(ApiToken.objects.get(user__username="eve").pk)
    assert_error(with_token(second).delete(f"{TOKENS}{eve_token_id}/"), 404)
    assert with_token(eves).get(ME).status_code == 200  # untouched
    assert_error(with_token(second).delete(f"{TOKENS}not-an-id/"), 400)
    assert_error(with_token(second).delete(f"{TOKENS}99999999/"), 404)

    # Ending the other device's token from this one.
    other_id = results[1]["id"]
    assert with_token(second).delete(f"{TOKENS}{other_id}/").status_code == 204
    assert_error(with_token(first).get(ME), 401)
    assert with_token(second).get(ME).status_code == 200
    assert_error(APIClient().get(TOKENS), 401)


def test_password_change_ends_tokens() -> None:
    user = UserFactory(username="dora")
    token = sign_in()["token"]
    assert with_token(token).get(ME).status_code == 200
    user.set_password("another-pass-5678")
    user.save()
    assert_error(with_token(token).get(ME), 401)
    assert not ApiToken.objects.filter(user=user).exists()
    # The new password signs in again.
    assert with_token(sign_in(password="another-pass-5678")["token"]).get(ME).status_code == 200


def test_password_changed_without_signals_still_ends_tokens() -> None:
    """A bulk update sends no signal: the fingerprint the token keeps refuses it
    once authentication reads the token from PostgreSQL again."""
    user = UserFactory(username="dora")
    token = sign_in()["token"]
    type(user).objects.filter(pk=user.pk).update(password="md5$other$0123456789abcdef")
    get_redis().delete(account_keys.auth_token(token_digest(token)))
    _cache_redis().delete(account_keys.auth_token(token_digest(token)))
    assert_error(with_token(token).get(ME), 401)


def test_deactivation_ends_tokens() -> None:
    user = UserFactory(username="dora")
    token = sign_in()["token"]
    assert with_token(token).get(ME).status_code == 200
    user.is_active = False
    user.save()
    assert_error(with_token(token).get(ME), 401)
    assert not ApiToken.objects.filter(user=user).exists()
    # Reactivated, the old token stays ended.
    user.is_active = True
    user.save()
    assert_error(with_token(token).get(ME), 401)


def test_a_sign_in_keeps_the_other_tokens() -> None:
    """Every sign-in saves last_login: that save must not end the user's tokens."""
    UserFactory(username="dora")
    first = sign_in()["token"]
    sign_in()
    assert with_token(first).get(ME).status_code == 200


def test_expired_token_answers_401() -> None:
    user = UserFactory(username="dora")
    now = timezone.now()
    # Issued a lifetime ago minus a minute: it has one minute left.
    token = token_issue(user=user, now=now - token_lifetime() + timedelta(minutes=1)).token
    assert with_token(token).get(ME).status_code == 200  # authentication's cache now holds it as valid
    with time_machine.travel(now + timedelta(minutes=2), tick=False):
        # Still fresh in the cache (its lifetime is minutes), refused by its expiry.
        assert_error(with_token(token).get(ME), 401)
    with time_machine.travel(now + timedelta(days=1), tick=False):
        assert_error(with_token(token).get(ME), 401)  # read from PostgreSQL again: no longer found


def test_sign_in_with_a_stale_authorization_header_still_works() -> None:
    UserFactory(username="dora")
    client = with_token("mc_not-a-token")
    response = client.post(SIGN_IN, {"username": "dora", "password": "pass-1234"}, format="json")
    assert response.status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        {"username": "dora"},
        {"username": 123, "password": "pass-1234"},
        {"username": "dora", "password": ["x"]},
        {"username": "dora", "password": "pass-1234", "extra": 1},
        [],
    ],
)
def test_sign_in_bad_input_is_400_and_issues_nothing(body: Any) -> None:
    UserFactory(username="dora")
    assert_error(APIClient().post(SIGN_IN, body, format="json"), 400)
    assert not ApiToken.objects.exists()


def test_expired_rows_are_cleaned_up() -> None:
    from accounts.tasks import tokens_delete_expired_task

    user = UserFactory(username="dora")
    now = timezone.now()
    expired = token_issue(user=user, now=now - token_lifetime() - timedelta(seconds=1)).row
    live = token_issue(user=user, now=now).row
    assert tokens_delete_expired_task() == 1
    assert list(ApiToken.objects.values_list("pk", flat=True)) == [live.pk]
    assert expired.pk != live.pk
