"""`manage.py check --deploy --fail-level WARNING` with the production settings
and the variables a real deployment sets; each HTTPS safeguard is configurable,
and switching one off makes the gate fail (so the gate is not vacuous)."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _deploy_check(**overrides: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SECURE_", "SESSION_", "CSRF_"))}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings.production",
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="messages.example.com,api.messages.example.com",
        DATABASE_URL=os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/messagecenter"),
        REDIS_URL=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
    )
    env.update(overrides)
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_production_passes_the_deploy_gate() -> None:
    result = _deploy_check()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


@pytest.mark.parametrize(
    ("variable", "value", "check_id"),
    [
        ("SECURE_HSTS_SECONDS", "0", "security.W004"),
        ("SECURE_SSL_REDIRECT", "false", "security.W008"),
        ("SESSION_COOKIE_SECURE", "false", "security.W012"),
        ("CSRF_COOKIE_SECURE", "false", "security.W016"),
        ("SECRET_KEY", "short", "security.W009"),
    ],
)
def test_each_safeguard_is_configurable_and_guarded(variable: str, value: str, check_id: str) -> None:
    result = _deploy_check(**{variable: value})
    assert result.returncode != 0
    assert check_id in result.stdout + result.stderr
