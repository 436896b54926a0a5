"""A Celery worker killed in the middle of a fan-out loses nothing and doubles nothing.

Real worker processes (``celery -A config worker --pool=solo``) consume a
queue of their own, with the test's PostgreSQL database and Redis
(config/settings/test_worker.py), once per broker: on the local RabbitMQ
(quorum queues, in a virtual host created for the test with rabbitmqctl and
deleted afterwards) and on Redis (the test's own Redis db, with a short
visibility timeout so that a dead worker's task comes back within seconds). A push message goes to 5,000
users in chunks of 100; every chunk is slowed down (test-only hook) so the
test can SIGKILL the worker twice while chunks are running, starting a new
worker each time. Tasks acknowledge late, so the message a dead worker held
is redelivered (the logs show a task received by two workers), and chunks are
idempotent (ZADD NX in deliver.lua, one FanoutChunk row per index), so in the
end every recipient has the item exactly once.

Deselected, visibly, when RabbitMQ does not answer on 127.0.0.1:5672 or the
database is SQLite (a worker process cannot share an in-memory test database).
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from celery import Celery
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.test import override_settings

from core.brokers import amqp_settings, broker_kind
from core.redis import get_redis
from live import keys as live_keys
from messagecenter import keys as mc_keys
from messagecenter import services, tasks
from messagecenter.items import message_entry
from messagecenter.models import FanoutChunk, Message, MessageStatus, PendingDelivery
from messagecenter.readmodel import inbox as readmodel_inbox
from tests.conftest import ROOT

RABBITMQ = os.environ.get("MESSAGECENTER_TEST_RABBITMQ", "amqp://guest:guest@127.0.0.1:5672")
# Redis: how long a task a worker took and never acknowledged stays invisible
# (longer than a chunk runs, short enough for the test).
REDIS_VISIBILITY_TIMEOUT = 3
USERS = 5000
CHUNK = 100
CHUNKS = USERS // CHUNK
CHUNK_SLEEP = 0.2  # per chunk: 0.1 s before the body, 0.1 s after it (before the late ack)

pytestmark = [pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]


class Worker:
    """One ``celery worker`` process with its log file."""

    def __init__(self, *, name: str, queue: str, log: Path, env: dict[str, str]) -> None:
        self.log = log
        command = [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool=solo", "--concurrency=1"]
        command += ["-Q", queue, "-n", f"{name}@%h", "--loglevel=INFO"]
        # Worker heartbeats stay on: their 2 s timer also wakes the solo pool's
        # event loop when py-amqp has buffered the next message (without them
        # the worker idled up to 10 s between chunks here).
        command += ["--without-gossip", "--without-mingle"]
        self.process = subprocess.Popen(  # noqa: S603
            command,
            cwd=ROOT,
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )

    def _ids(self, event: str) -> set[str]:
        text = self.log.read_text(errors="replace")
        return set(re.findall(rf"message_fanout_chunk\[([0-9a-f-]+)\] {event}", text))

    def received(self) -> set[str]:
        """Ids of the fan-out chunk tasks this worker took off the queue."""
        return self._ids("received")

    def running(self) -> bool:
        """Is a chunk task between "received" and "succeeded" (run, not acked yet)?"""
        return bool(self.received() - self._ids("succeeded"))

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)  # no warm or cold shutdown: a crash
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


def _rabbitmqctl(*args: str) -> str:
    done = subprocess.run(["rabbitmqctl", "-q", *args], check=True, capture_output=True, text=True, timeout=60)  # noqa: S603,S607
    return done.stdout


@pytest.fixture(params=["rabbitmq", "redis"])
def broker_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """The broker's URL: a RabbitMQ virtual host of the test's own (the
    default one, with the queue names unique, where rabbitmqctl is not at
    hand), or the test's Redis db."""
    if request.param == "redis":
        yield str(settings.CACHES["default"]["LOCATION"])
        return
    if shutil.which("rabbitmqctl") is None:
        yield f"{RABBITMQ}//"
        return
    vhost = f"mc-test-{uuid.uuid4().hex[:12]}"
    _rabbitmqctl("add_vhost", vhost)
    try:
        _rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        yield f"{RABBITMQ}/{vhost}"
    finally:
        _rabbitmqctl("delete_vhost", vhost)


def make_sender(broker_url: str) -> Celery:
    """A Celery app that publishes like the project does on this broker."""
    # Not the process's current app: the suite's own (eager) app stays current
    # for the tests that run after this one in the same process.
    sender = Celery("sender", broker=broker_url, set_as_current=False)
    if broker_kind(broker_url) == "amqp":
        options = amqp_settings()
        sender.conf.task_create_missing_queue_type = options["TASK_CREATE_MISSING_QUEUE_TYPE"]
        sender.conf.task_default_queue_type = options["TASK_DEFAULT_QUEUE_TYPE"]
    return sender


@pytest.fixture
def queue(broker_url: str) -> Iterator[str]:
    name = f"mc-test-{uuid.uuid4().hex[:12]}"
    yield name
    with make_sender(broker_url).connection_for_write() as connection:
        connection.default_channel.queue_delete(name)


@pytest.fixture
def start_worker(queue: str, broker_url: str, tmp_path: Path) -> Iterator[Any]:
    db = settings.DATABASES["default"]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("CELERY_", "MESSAGECENTER_"))},
        "DJANGO_SETTINGS_MODULE": "config.settings.test_worker",
        "MESSAGECENTER_TEST_DATABASE_NAME": str(db["NAME"]),
        "MESSAGECENTER_TEST_CACHE_URL": str(settings.CACHES["default"]["LOCATION"]),
        "MESSAGECENTER_TEST_QUEUE": queue,
        "MESSAGECENTER_TEST_CHUNK_SLEEP": str(CHUNK_SLEEP),
        "MESSAGECENTER_KEY_PREFIX": str(settings.MESSAGECENTER_KEY_PREFIX),
        "MESSAGECENTER_FANOUT_CHUNK": str(CHUNK),
        "MESSAGECENTER_REDIS_CLUSTER_URL": str(settings.MESSAGECENTER_REDIS_CLUSTER_URL),
        "CELERY_BROKER_URL": broker_url,
        "MESSAGECENTER_BROKER_VISIBILITY_TIMEOUT": str(REDIS_VISIBILITY_TIMEOUT),
        "PYTHONUNBUFFERED": "1",
    }
    workers: list[Worker] = []

    def start() -> Worker:
        # The node name is the queue's too: a worker's remote-control queue on the
        # broker (<name>.celery.pidbox) is exclusive, and runs side by side share the broker.
        name = f"w{len(workers)}-{queue}"
        worker = Worker(name=name, queue=queue, log=tmp_path / f"worker{len(workers)}.log", env=env)
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        worker.stop()


def wait_for(condition: Any, *, timeout: float, what: str, worker: Worker | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if worker is not None and worker.process.poll() is not None:
            raise AssertionError(f"worker died: {worker.log.read_text(errors='replace')[-3000:]}")
        if time.monotonic() > deadline:
            log = worker.log.read_text(errors="replace")[-3000:] if worker else ""
            raise AssertionError(f"timed out waiting for {what}\n{log}")
        time.sleep(0.02)


def chunks_done() -> int:
    return FanoutChunk.objects.filter(message__title="to everyone, chunk by chunk").count()


@override_settings(MESSAGECENTER_FANOUT_CHUNK=CHUNK, MESSAGECENTER_PUSH_THRESHOLD=USERS)
def test_a_killed_worker_loses_no_chunk_and_doubles_no_item(
    start_worker: Any, queue: str, broker_url: str, operator: Any
) -> None:
    user_model = get_user_model()
    user_model.objects.bulk_create(user_model(username=f"fan{i}", password="!") for i in range(USERS))
    user_ids = list(user_model.objects.filter(username__startswith="fan").values_list("pk", flat=True))

    # The message goes to the workers' queue through the broker (this process
    # runs tasks eagerly otherwise): message_send hands its pending delivery
    # to the task after commit.
    sender = make_sender(broker_url)
    sent: list[int] = []
    committed: list[bool] = []

    def apply_async(args: list[int], **options: Any) -> None:
        committed.append(not transaction.get_connection().in_atomic_block)
        sender.send_task("messagecenter.message_deliver", args=args, queue=queue)
        sent.append(args[0])

    task = tasks.message_deliver_task
    first = start_worker()
    eager = task.app.conf.task_always_eager
    # message_send enqueues (through the sender above) instead of delivering here.
    task.app.conf.task_always_eager = False
    task.apply_async = apply_async
    try:
        message = services.message_send(
            sender=operator,
            category="system",
            title="to everyone, chunk by chunk",
            body_html="<p>hi</p>",
            user_ids=user_ids,
        )
    finally:
        task.app.conf.task_always_eager = eager
        del task.apply_async
    assert message.delivery == "push"
    assert sent == [message.pk]
    assert committed == [True]

    # Kill the first worker once 10 chunks are done, the second one at 25,
    # each while it runs a chunk (a message it holds unacknowledged).
    wait_for(lambda: chunks_done() >= 10 and first.running(), timeout=240, what="10 chunks", worker=first)
    first.kill()
    assert 10 <= chunks_done() < CHUNKS
    second = start_worker()
    wait_for(lambda: chunks_done() >= 25 and second.running(), timeout=240, what="25 chunks", worker=second)
    second.kill()
    assert chunks_done() < CHUNKS
    third = start_worker()
    wait_for(
        lambda: (
            Message.objects.filter(pk=message.pk, status=MessageStatus.DELIVERED).exists()
            and bool(second.received() & third.received())
        ),
        timeout=240,
        what="the fan-out to finish",
        worker=third,
    )

    if broker_kind(broker_url) == "amqp" and shutil.which("rabbitmqctl"):
        # The workers' queue is a quorum queue (replicated, durable).
        vhost = urlsplit(broker_url).path[1:] or "/"
        listed = _rabbitmqctl("list_queues", "-p", vhost, "--no-table-headers", "name", "type")
        assert f"{queue}\tquorum" in listed, listed

    # Every pending delivery row (the delivery's, each chunk's) was cleared by its task.
    wait_for(
        lambda: not PendingDelivery.objects.filter(object_id=message.pk).exists(),
        timeout=30,
        what="the pending deliveries to clear",
        worker=third,
    )

    # A chunk a killed worker held was redelivered to the next one (late acks).
    # RabbitMQ hands a dead worker's task back at once, Redis once its
    # visibility timeout has passed (the third worker may be the one to get it).
    assert first.received() & (second.received() | third.received()), "no task of the first worker was redelivered"
    assert second.received() & third.received(), "no task of the second worker was redelivered"

    # PostgreSQL: every chunk exactly once, covering the audience.
    rows = list(FanoutChunk.objects.filter(message=message).values_list("index", "size"))
    assert sorted(index for index, _ in rows) == list(range(CHUNKS))
    assert sum(size for _, size in rows) == USERS

    # Redis: every recipient has the item exactly once, arrived once (so its
    # next read counts it once), and its inbox changed exactly once (the live
    # version counts gains, not attempts).
    member = message_entry(message).member
    pipe = get_redis().pipeline(transaction=False)
    for user_id in user_ids:
        pipe.zrange(mc_keys.inbox(user_id), 0, -1)
        pipe.zrange(mc_keys.inbox_arrivals(user_id), 0, -1)
        pipe.get(live_keys.user_version(user_id))
    replies = pipe.execute()
    wrong = []
    for i, user_id in enumerate(user_ids):
        inbox, arrived, version = replies[3 * i : 3 * i + 3]
        if inbox != [member.encode()] or arrived != [member.encode()] or int(version or 0) != 1:
            wrong.append((user_id, inbox, arrived, version))
    assert not wrong, f"{len(wrong)} recipients wrong, e.g. {wrong[:3]}"
    now_ms = int(time.time() * 1000)
    for user_id in user_ids[:: max(1, len(user_ids) // 20)]:
        assert readmodel_inbox.inbox_counts(user_id=user_id, now_ms=now_ms).unread == 1, user_id
