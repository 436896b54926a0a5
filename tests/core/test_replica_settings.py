"""Replica settings: a bad DATABASE_REPLICA_URLS stops the process at start
with a clear message, and so does a replica that does not answer when a
serving process starts (WSGI, ASGI, ``manage.py serve``; not ``migrate``);
without replicas the router leaves every query on the primary (the replica
tests themselves are in test_replicas.py)."""

import os
import socket
import subprocess
import sys
import uuid
from typing import Any
from urllib.parse import quote

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.db import router

from core.replicas import replica_databases
from tests.conftest import ROOT

PRIMARY = {"ENGINE": "django.db.backends.postgresql", "NAME": "mc", "OPTIONS": {"pool": {"min_size": 2, "timeout": 5}}}


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://u:p@db/mc", "is not a PostgreSQL URL"),
        ("replica.example.com", "is not a PostgreSQL URL"),
        ("postgres://u:secret@db:99999/mc", "has a bad port"),
        ("postgres:///mc", "needs a host and a database name"),
        ("postgres://u:p@db:5432/", "needs a host and a database name"),
    ],
)
def test_a_bad_replica_url_is_refused_with_the_reason(url: str, message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=message) as refused:
        replica_databases([url], primary=PRIMARY, timeout=1.0)
    assert "secret" not in str(refused.value)  # the password is not printed


def test_replicas_need_a_postgresql_primary() -> None:
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL is not PostgreSQL"):
        replica_databases(["postgres://u@db/mc"], primary={"ENGINE": "django.db.backends.sqlite3"}, timeout=1.0)


def test_replica_entries_keep_the_primary_pool_with_a_short_timeout() -> None:
    databases = replica_databases(
        ["postgres://u:p@r1:5433/mc", " ", "postgresql://u:p@r2/mc"], primary=PRIMARY, timeout=0.5
    )
    assert list(databases) == ["replica0", "replica2"]
    first = databases["replica0"]
    assert (first["HOST"], first["PORT"], first["NAME"]) == ("r1", 5433, "mc")
    assert first["OPTIONS"]["pool"] == {"min_size": 2, "timeout": 0.5}
    assert first["TEST"] == {"MIRROR": "default"}


def test_the_process_does_not_start_with_a_bad_replica_url() -> None:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.local",
        "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/mc",
        "DATABASE_REPLICA_URLS": "postgres://postgres@127.0.0.1:5432/mc,not-a-url",
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert "DATABASE_REPLICA_URLS: 'not-a-url' is not a PostgreSQL URL" in done.stderr


def test_without_replicas_the_router_has_no_opinion(settings: Any) -> None:
    settings.DATABASE_REPLICA_ALIASES = []
    assert router.db_for_read(User) == "default"
    assert router.db_for_write(User) == "default"


# --- a replica that does not answer when a serving process starts --------------------


def _closed_port() -> int:
    """A local port nothing listens on (bound for a moment, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _url_of(database: dict[str, Any], *, name: str | None = None, password: str | None = None) -> str:
    """A PostgreSQL URL for the run's database (the test database unless ``name``)."""
    user = quote(str(database.get("USER") or "postgres"), safe="")
    secret = password if password is not None else str(database.get("PASSWORD") or "")
    credentials = f"{user}:{quote(secret, safe='')}" if secret else user
    host = database.get("HOST") or "127.0.0.1"
    port = database.get("PORT") or 5432
    return f"postgres://{credentials}@{host}:{port}/{name or database['NAME']}"


def _start(command: list[str], *, replica_urls: str, primary_url: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.local",
        "DATABASE_URL": primary_url,
        "DATABASE_REPLICA_URLS": replica_urls,
    }
    return subprocess.run(  # noqa: S603
        [sys.executable, *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


_BUILD_WSGI = ["-c", "import config.wsgi; print('built')"]
_BUILD_ASGI = ["-c", "import config.asgi; print('built')"]
# The check comes before anything else serve does (no demo data, no rebuild).
_SERVE = ["manage.py", "serve", "--no-demo", "127.0.0.1:0"]


@pytest.mark.parametrize("command", [_BUILD_WSGI, _BUILD_ASGI, _SERVE], ids=["wsgi", "asgi", "serve"])
def test_a_serving_process_does_not_start_with_a_replica_nothing_listens_on(command: list[str]) -> None:
    port = _closed_port()
    url = f"postgres://reader:s3cr3t-pw@127.0.0.1:{port}/mc"
    done = _start(command, replica_urls=url, primary_url="postgres://postgres@127.0.0.1:5432/mc")
    assert done.returncode != 0
    assert "built" not in done.stdout
    assert f"DATABASE_REPLICA_URLS: replica0 at 127.0.0.1:{port}/mc cannot be reached (" in done.stderr
    assert "Connection refused" in done.stderr
    assert "or remove it from DATABASE_REPLICA_URLS." in done.stderr
    assert "s3cr3t-pw" not in done.stderr
    if command is _SERVE:
        assert "CommandError: DATABASE_REPLICA_URLS" in done.stderr  # the message, not a traceback
        assert "Traceback" not in done.stderr


def test_an_unknown_replica_host_is_named_with_the_reason() -> None:
    url = "postgres://reader:s3cr3t-pw@no-such-replica.invalid:5433/mc"
    done = _start(_BUILD_WSGI, replica_urls=url, primary_url="postgres://postgres@127.0.0.1:5432/mc")
    assert done.returncode != 0
    assert "replica0 at no-such-replica.invalid:5433/mc cannot be reached (" in done.stderr
    assert "no-such-replica.invalid" in done.stderr.split("cannot be reached (", 1)[1]  # libpq's own reason
    assert "s3cr3t-pw" not in done.stderr


@pytest.mark.postgres
@pytest.mark.django_db
def test_a_replica_server_that_refuses_the_database_stops_the_start() -> None:
    database = settings.DATABASES["default"]
    missing = f"no_such_replica_{uuid.uuid4().hex[:8]}"
    reachable = _url_of(database)
    # The second replica answers but has no such database: both are checked, one is named.
    done = _start(_BUILD_WSGI, replica_urls=f"{reachable},{_url_of(database, name=missing)}", primary_url=reachable)
    assert done.returncode != 0
    assert f"replica1 at {database.get('HOST') or '127.0.0.1'}:{database.get('PORT') or 5432}/{missing}" in done.stderr
    assert f'database "{missing}" does not exist' in done.stderr
    assert "replica0" not in done.stderr


@pytest.mark.postgres
@pytest.mark.django_db
@pytest.mark.parametrize("command", [_BUILD_WSGI, _BUILD_ASGI], ids=["wsgi", "asgi"])
def test_a_serving_process_starts_with_a_replica_that_answers(command: list[str]) -> None:
    # The run's own PostgreSQL stands in for a replica: the check only connects.
    url = _url_of(settings.DATABASES["default"])
    done = _start(command, replica_urls=url, primary_url=url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "built"


@pytest.mark.postgres
@pytest.mark.django_db
def test_migrate_is_not_held_up_by_a_replica_that_does_not_answer() -> None:
    primary = _url_of(settings.DATABASES["default"])
    dead = f"postgres://postgres@127.0.0.1:{_closed_port()}/mc"
    done = _start(["manage.py", "migrate", "--check"], replica_urls=dead, primary_url=primary)
    assert done.returncode == 0, done.stderr  # the test database is migrated: nothing to apply
    assert "cannot be reached" not in done.stderr
