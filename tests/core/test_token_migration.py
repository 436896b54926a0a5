"""The migration that moves DRF's plaintext tokens to digests: each old token
keeps working (until the date it prints), and no plaintext copy is left."""

import importlib
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
import time_machine
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import ApiToken
from accounts.tokens import token_digest, token_lifetime
from tests.conftest import assert_error
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

migration = importlib.import_module("core.migrations.0006_api_tokens")


def _apps_at_0006() -> Any:
    """The models as migration 0006 saw them (ApiToken was core's then)."""
    return MigrationLoader(connection).project_state(("core", "0006_api_tokens")).apps


def _legacy_table(rows: list[tuple[str, int]]) -> None:
    """DRF authtoken's table as an existing deployment has it."""
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, created timestamp with time zone NOT NULL,"
            " user_id integer NOT NULL UNIQUE)"
            if connection.vendor == "postgresql"
            else "CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, created datetime NOT NULL,"
            " user_id integer NOT NULL UNIQUE)"
        )
        for key, user_id in rows:
            cursor.execute(
                "INSERT INTO authtoken_token (key, created, user_id) VALUES (%s, %s, %s)",
                [key, timezone.now() - timedelta(days=400), user_id],
            )


def test_existing_tokens_migrated_to_digests(capsys: pytest.CaptureFixture[str]) -> None:
    dora, eve = UserFactory(username="dora"), UserFactory(username="eve")
    old = {"dora": "a" * 40, "eve": "0123456789abcdef0123456789abcdef01234567"}
    _legacy_table([(old["dora"], dora.pk), (old["eve"], eve.pk)])

    migration.adopt_legacy_tokens(_apps_at_0006(), SimpleNamespace(connection=connection))

    printed = capsys.readouterr().out
    expires = timezone.now() + token_lifetime()
    assert "2 API token(s) moved to digests" in printed
    assert f"{expires:%Y-%m-%d}" in printed
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM authtoken_token")
        assert cursor.fetchone()[0] == 0  # no plaintext left
    assert set(ApiToken.objects.values_list("digest", flat=True)) == {token_digest(k) for k in old.values()}

    # Each old token keeps working as it was...
    for username, key in old.items():
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        assert client.get("/api/v1/me/").json()["username"] == username
    # ...until the printed date.
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {old['dora']}")
    with time_machine.travel(expires + timedelta(minutes=1), tick=False):
        assert_error(client.get("/api/v1/me/"), 401)

    # Run again (a re-applied migration): nothing doubles, nothing is printed.
    migration.adopt_legacy_tokens(_apps_at_0006(), SimpleNamespace(connection=connection))
    assert ApiToken.objects.count() == 2
    assert capsys.readouterr().out == ""


def test_no_legacy_table_is_a_no_op(capsys: pytest.CaptureFixture[str]) -> None:
    migration.adopt_legacy_tokens(_apps_at_0006(), SimpleNamespace(connection=connection))
    assert not ApiToken.objects.exists()
    assert capsys.readouterr().out == ""
