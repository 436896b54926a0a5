"""Settings selection: embedded defaults without variables, real services with them."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, django
from django.conf import settings
django.setup()
opts = settings.CACHES["default"]["OPTIONS"]["CONNECTION_POOL_KWARGS"]
print(json.dumps({
    "db": settings.DATABASES["default"]["ENGINE"],
    "db_name": str(settings.DATABASES["default"]["NAME"]),
    "cache": settings.CACHES["default"]["LOCATION"],
    "connection": opts["connection_class"].__name__,
    "timeout": opts.get("socket_timeout"),
    "eager": settings.CELERY_TASK_ALWAYS_EAGER,
    "broker": settings.CELERY_BROKER_URL,
    "acks_late": settings.CELERY_TASK_ACKS_LATE,
    "serializer": settings.CELERY_TASK_SERIALIZER,
    "prefix": settings.MESSAGECENTER_KEY_PREFIX,
    "threshold": settings.MESSAGECENTER_PUSH_THRESHOLD,
    "debug": settings.DEBUG,
}))
"""


def _probe(module: str, **env: str) -> dict[str, object]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DATABASE_URL", "REDIS_URL", "CELERY_", "MESSAGECENTER_"))
    }
    clean.update(env, DJANGO_SETTINGS_MODULE=module)
    out = subprocess.run(  # noqa: S603
        [sys.executable, "-c", PROBE], cwd=ROOT, env=clean, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_embedded_defaults_without_variables() -> None:
    got = _probe("config.settings.local")
    assert got["db"] == "django.db.backends.sqlite3"
    assert got["connection"] == "FakeRedisConnection"
    assert got["eager"] is True
    assert got["debug"] is True


def test_real_services_with_variables() -> None:
    got = _probe(
        "config.settings.local",
        DATABASE_URL="postgres://postgres@127.0.0.1:5432/mc",
        REDIS_URL="redis://127.0.0.1:6379/3",
        CELERY_BROKER_URL="redis://127.0.0.1:6379/4",
        MESSAGECENTER_PUSH_THRESHOLD="123",
        MESSAGECENTER_KEY_PREFIX="x:",
    )
    assert got["db"] == "django.db.backends.postgresql"
    assert got["db_name"] == "mc"
    assert got["cache"] == "redis://127.0.0.1:6379/3"
    assert got["connection"] == "BreakerConnection"
    assert got["timeout"] == pytest.approx(0.5)
    assert got["eager"] is False
    assert got["broker"] == "redis://127.0.0.1:6379/4"
    assert got["acks_late"] is True
    assert got["serializer"] == "json"
    assert got["threshold"] == 123
    assert got["prefix"] == "x:"


def test_production_settings_pass_deploy_checks_without_warnings() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "REDIS_URL"))}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings.production",
        SECRET_KEY="k" * 20 + "a-real-and-long-random-production-secret-0123456789",
        ALLOWED_HOSTS="messages.example.com",
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_settings_refuse_to_start_without_a_secret() -> None:
    env = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY"}}
    env.update(DJANGO_SETTINGS_MODULE="config.settings.production", ALLOWED_HOSTS="x.example.com")
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"MESSAGECENTER_CACHE_TOMBSTONE_SECONDS": "1"}, "MESSAGECENTER_CACHE_TOMBSTONE_SECONDS"),
        ({"MESSAGECENTER_CACHE_JITTER": "1.5"}, "MESSAGECENTER_CACHE_JITTER"),
    ],
)
def test_cache_settings_that_break_invalidation_refuse_to_start(env: dict[str, str], named: str) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "REDIS_URL", "MESSAGECENTER_"))}
    clean.update(env, DJANGO_SETTINGS_MODULE="config.settings.local")
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=clean, capture_output=True, text=True, check=False
    )
    assert result.returncode != 0
    assert named in result.stderr
