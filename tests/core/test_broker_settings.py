"""The broker URL: a malformed one stops the process at start with the
reason; RabbitMQ gets quorum queues and publisher confirms, with late acks
and a prefetch of one (the worker-kill test runs on both brokers:
tests/faults/test_worker_kill.py)."""

import os
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from core.brokers import broker_kind
from tests.conftest import ROOT


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("", None),
        ("redis://127.0.0.1:6379/1", "redis"),
        ("rediss://:pw@cache.example.com:6380/0", "redis"),
        ("amqp://guest:guest@127.0.0.1:5672//", "amqp"),
        ("pyamqp://u:p@rabbit/vhost", "amqp"),
    ],
)
def test_broker_kinds(url: str, kind: str | None) -> None:
    assert broker_kind(url) == kind


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("amqp//guest:guest@127.0.0.1", "is neither a Redis"),
        ("kafka://broker:9092", "is neither a Redis"),
        ("amqp://u:secret@rabbit:99999//", "has a bad port"),
        ("amqp:///vhost", "names no host"),
        ("redis://127.0.0.1:6379/first", "a Redis database is a number"),
    ],
)
def test_a_malformed_broker_url_is_refused_with_the_reason(url: str, message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=message) as refused:
        broker_kind(url)
    assert "secret" not in str(refused.value)


def _settings_of(broker_url: str, expression: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings.local", "CELERY_BROKER_URL": broker_url}
    code = f"import django; django.setup(); from config.celery import app; print({expression})"
    return subprocess.run(  # noqa: S603
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def test_a_worker_does_not_start_on_a_malformed_broker_url() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool=solo"],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings.local", "CELERY_BROKER_URL": "amqp//x"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "CELERY_BROKER_URL: 'amqp//x' is neither a Redis" in done.stderr


def test_rabbitmq_settings() -> None:
    expression = (
        "app.conf.task_default_queue_type, app.conf.task_create_missing_queue_type,"
        " app.conf.broker_transport_options['confirm_publish'], app.conf.task_acks_late,"
        " app.conf.worker_prefetch_multiplier"
    )
    done = _settings_of("amqp://guest:guest@127.0.0.1:5672//", expression)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "quorum quorum True True 1"
    redis = _settings_of("redis://127.0.0.1:6379/1", "app.conf.task_default_queue_type")
    assert redis.stdout.strip().splitlines()[-1] == "classic"


def test_a_dead_workers_tasks_come_back_through_the_broker() -> None:
    """Late acks with reject-on-worker-lost on both brokers; on Redis the
    visibility timeout is what hands a dead worker's task out again."""
    flags = "app.conf.task_acks_late, app.conf.task_reject_on_worker_lost"
    rabbit = _settings_of("amqp://guest:guest@127.0.0.1:5672//", flags)
    assert rabbit.returncode == 0, rabbit.stderr
    assert rabbit.stdout.strip().splitlines()[-1] == "True True"
    redis = _settings_of(
        "redis://127.0.0.1:6379/1", f"{flags}, app.conf.broker_transport_options['visibility_timeout']"
    )
    assert redis.returncode == 0, redis.stderr
    assert redis.stdout.strip().splitlines()[-1] == "True True 1800"
