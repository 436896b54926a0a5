"""Replica settings: a bad DATABASE_REPLICA_URLS stops the process at start
with a clear message; without replicas the router leaves every query on the
primary (the replica tests themselves are in test_replicas.py)."""

import os
import subprocess
import sys
from typing import Any

import pytest
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
