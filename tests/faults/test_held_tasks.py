"""A delivery task held by a dead worker on a Redis broker comes back within the run lease.

A worker that took a fan-out chunk (its prefetch) and was SIGKILLed before
the task's body ran leaves the message unacknowledged in kombu's Redis
transport, which restores it only after the visibility timeout (half an hour
here). The relay puts such delivery messages back in their queue once they
have been held longer than the run lease. The broker is a private
redis-server; the worker is a real process that takes one message without
acknowledging it and SIGKILLs itself.
"""

import base64
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as redis_py
from celery import Celery, current_app
from django.test import override_settings

from core.brokers import restore_held
from messagecenter.services import delivery
from tests.conftest import ROOT
from tests.faults.conftest import RedisServer, start_private_server

pytestmark = pytest.mark.redis_server

CHUNK_TASK = "messagecenter.message_fanout_chunk"

# Takes one message from the queue without acknowledging it, then dies as a
# SIGKILLed worker does: no warm shutdown, so kombu cannot hand it back.
_TAKE_AND_DIE = """
import os, signal, sys
from kombu import Connection
with Connection(sys.argv[1]) as connection:
    queue = connection.SimpleQueue(sys.argv[2], no_ack=False)
    queue.get(timeout=10)
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RedisServer]:
    server = start_private_server(tmp_path)
    try:
        yield server
    finally:
        server.close()


def _url(server: RedisServer) -> str:
    return f"redis://127.0.0.1:{server.port}/1"


def _app(server: RedisServer) -> Celery:
    """The project's Celery settings on the private broker, not eager."""
    app = Celery("held-tasks", set_as_current=False)
    app.config_from_object("django.conf:settings", namespace="CELERY")
    app.conf.broker_url = _url(server)
    app.conf.task_always_eager = False
    return app


def _held_by_dead_worker(server: RedisServer, app: Celery, *, task: str, args: list[int], queue: str) -> None:
    app.send_task(task, args=args, queue=queue)
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-c", _TAKE_AND_DIE, _url(server), queue], cwd=ROOT, capture_output=True, timeout=60
    )
    assert done.returncode == -9, done.stderr.decode(errors="replace")
    client = _broker_db(server)
    assert client.llen(queue) == 0
    assert client.hlen("unacked") == 1, "the killed consumer should hold the message unacknowledged"


def _broker_db(server: RedisServer) -> Any:
    return redis_py.Redis(host="127.0.0.1", port=server.port, db=1, socket_timeout=5)


def _queued_args(server: RedisServer, queue: str) -> list[list[int]]:
    """The args of each message waiting in ``queue`` (Celery's protocol 2 body)."""
    found = []
    for raw in _broker_db(server).lrange(queue, 0, -1):
        body = json.loads(base64.b64decode(json.loads(raw)["body"]))
        found.append(body[0])
    return found


def test_a_held_delivery_message_goes_back_to_its_queue_once_older_than_asked(broker: RedisServer) -> None:
    app = _app(broker)
    queue = f"held-{uuid.uuid4().hex[:8]}"
    _held_by_dead_worker(broker, app, task=CHUNK_TASK, args=[11, 4], queue=queue)
    db = _broker_db(broker)

    # Not one of the named tasks, or not held long enough: left alone.
    assert restore_held(app, tasks={"messagecenter.delivery_relay"}, older_than=0) == 0
    assert restore_held(app, tasks={CHUNK_TASK}, older_than=60) == 0
    assert db.llen(queue) == 0
    assert db.hlen("unacked") == 1

    assert restore_held(app, tasks={CHUNK_TASK}, older_than=0) == 1
    assert _queued_args(broker, queue) == [[11, 4]]
    assert db.hlen("unacked") == 0
    assert db.zcard("unacked_index") == 0
    # Restored once: a second pass finds nothing.
    assert restore_held(app, tasks={CHUNK_TASK}, older_than=0) == 0
    assert db.llen(queue) == 1


def test_a_broker_other_than_redis_has_nothing_to_restore() -> None:
    app = Celery("memory-broker", set_as_current=False, broker="memory://")
    assert restore_held(app, tasks={CHUNK_TASK}, older_than=0) == 0


@pytest.mark.django_db
def test_the_relay_requeues_a_chunk_a_dead_worker_took_after_the_run_lease(broker: RedisServer) -> None:
    app = _app(broker)
    queue = app.conf.task_default_queue
    _held_by_dead_worker(broker, app, task=CHUNK_TASK, args=[7, 2], queue=queue)
    previous = current_app._get_current_object()
    app.set_current()
    delivery.forget_local_state()
    try:
        with override_settings(CELERY_BROKER_KIND="redis", MESSAGECENTER_DELIVERY_RUN_LEASE_SECONDS=0.3):
            delivery.delivery_relay()
            assert _queued_args(broker, queue) == [], "held for less than the run lease: a worker may be starting it"
            time.sleep(0.4)
            delivery.delivery_relay()
    finally:
        previous.set_current()
        delivery.forget_local_state()
    assert _queued_args(broker, queue) == [[7, 2]]
    assert _broker_db(broker).hlen("unacked") == 0
