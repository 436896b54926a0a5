"""Delivery is never dropped: a broker or a read-model Redis that is down
leaves the work pending in PostgreSQL, and it is delivered exactly once
when they are back (the relay, or ``check_redis --repair``)."""

import os
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from amqp.exceptions import MessageNacked
from celery import Celery, current_app
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone

from core.breaker import reset_breakers
from core.redis import get_redis
from live import keys as live_keys
from messagecenter import keys as mc_keys
from messagecenter import services
from messagecenter.items import message_entry, notification_entry
from messagecenter.models import FanoutChunk, Message, MessageStatus, Notification, PendingDelivery
from messagecenter.readmodel import inbox as readmodel_inbox
from messagecenter.readmodel import to_ms
from messagecenter.services import delivery, messages, notifications
from tests.faults.conftest import RedisServer
from tests.faults.test_worker_kill import Worker

pytestmark = [pytest.mark.django_db(transaction=True)]

# Nothing listens on port 1: a connection is refused at once.
DEAD_BROKER_URL = "redis://127.0.0.1:1/0"
# Far below kombu's own reconnecting (seconds) on a refused broker.
PUBLISH_SECONDS = 1.5


@pytest.fixture
def dead_broker() -> Iterator[Celery]:
    """The project's Celery settings with a broker nobody answers, not eager:
    the services hand their work to it as in production."""
    previous = current_app._get_current_object()
    app = Celery("dead-broker", set_as_current=False)
    app.config_from_object("django.conf:settings", namespace="CELERY")
    app.conf.broker_url = DEAD_BROKER_URL
    app.conf.task_always_eager = False
    app.set_current()
    delivery.forget_local_state()
    try:
        yield app
    finally:
        previous.set_current()
        delivery.forget_local_state()


def _inbox(user_id: int) -> list[bytes]:
    return list(get_redis().zrange(mc_keys.inbox(user_id), 0, -1))


def _unread(user_id: int) -> int:
    """The user's unread count as a read answers it (placing what arrived)."""
    counts = readmodel_inbox.inbox_counts(user_id=user_id, now_ms=to_ms(timezone.now()))
    return counts.unread_by_category["system"]


def _version(user_id: int) -> int:
    return int(get_redis().get(live_keys.user_version(user_id)) or 0)


def _pending(message: Message) -> list[tuple[str, int]]:
    return sorted(PendingDelivery.objects.filter(object_id=message.pk).values_list("task", "index"))


def _assert_delivered_once(message: Message, user_ids: list[int]) -> None:
    member = message_entry(message).member.encode()
    for user_id in user_ids:
        assert _inbox(user_id) == [member], user_id
        assert _unread(user_id) == 1, user_id
        assert _version(user_id) == 1, user_id  # the inbox changed once: no attempt counted twice


@override_settings(MESSAGECENTER_DELIVERY_RETRY_MAX_SECONDS=0)
def test_publishing_with_the_broker_unreachable_answers_202_and_the_relay_sends_it_later(
    dead_broker: Celery, operator_client: Any, recipient: Any
) -> None:
    payload = {"category": "system", "title": "Hello", "body_html": "<p>hi</p>", "to": {"users": [recipient.pk]}}
    started = time.monotonic()
    response = operator_client.post("/api/v1/manage/messages/", payload, format="json")
    assert response.status_code == 202, response.content
    assert time.monotonic() - started < PUBLISH_SECONDS
    message = Message.objects.get(pk=response.json()["id"])
    # Committed with the message, refused by the broker: pending, nothing in Redis yet.
    assert message.status == MessageStatus.QUEUED
    [row] = PendingDelivery.objects.filter(object_id=message.pk)
    assert (row.task, row.index, row.attempts) == (messages.DELIVER_TASK, 0, 1)
    assert "OperationalError" in row.last_error
    assert _inbox(recipient.pk) == []

    # A second publish while the broker is still down answers as fast, and keeps its row too.
    started = time.monotonic()
    second = operator_client.post("/api/v1/manage/messages/", {**payload, "title": "Again"}, format="json")
    assert second.status_code == 202
    assert time.monotonic() - started < PUBLISH_SECONDS
    later = Message.objects.get(pk=second.json()["id"])
    assert _pending(later) == [(messages.DELIVER_TASK, 0)]

    # Beat's relay with the broker still down: nothing handed over, nothing lost.
    assert delivery.delivery_relay() == 0
    assert PendingDelivery.objects.count() == 2

    # The broker is back (here: the tasks run in this process, as a worker would).
    dead_broker.conf.task_always_eager = True
    delivery.forget_local_state()
    assert delivery.delivery_relay() == 2
    assert PendingDelivery.objects.count() == 0
    for sent in (message, later):
        sent.refresh_from_db()
        assert sent.status == MessageStatus.DELIVERED
    members = {message_entry(m).member.encode() for m in (message, later)}
    assert set(_inbox(recipient.pk)) == members
    assert _unread(recipient.pk) == 2


@override_settings(MESSAGECENTER_DELIVERY_RETRY_MAX_SECONDS=0)
def test_a_notification_sent_with_the_broker_unreachable_is_delivered_later(
    dead_broker: Celery, operator_client: Any, recipient: Any
) -> None:
    created = operator_client.post("/api/v1/manage/message-types/", {"code": "stock", "name": "Stock"}, format="json")
    assert created.status_code == 201, created.content
    subscription = {"message_type": "stock", "scope": "WH1", "user": recipient.pk}
    assert operator_client.post("/api/v1/manage/subscriptions/", subscription, format="json").status_code == 201
    started = time.monotonic()
    response = operator_client.post(
        "/api/v1/manage/notifications/",
        {"message_type": "stock", "scope": "WH1", "title": "Low", "body_html": "<p>x</p>"},
        format="json",
    )
    assert response.status_code == 202, response.content
    assert time.monotonic() - started < PUBLISH_SECONDS
    notification_id = int(response.json()["id"])
    pending = list(PendingDelivery.objects.filter(object_id=notification_id).values_list("task", "index"))
    assert pending == [(notifications.DELIVER_TASK, 0)]
    assert _inbox(recipient.pk) == []

    dead_broker.conf.task_always_eager = True  # the broker is back
    delivery.forget_local_state()
    assert delivery.delivery_relay() == 1
    assert not PendingDelivery.objects.exists()
    assert _inbox(recipient.pk) == [notification_entry(Notification.objects.get(pk=notification_id)).member.encode()]
    assert _unread(recipient.pk) == 1


@pytest.mark.redis_server
@override_settings(MESSAGECENTER_FANOUT_CHUNK=2, MESSAGECENTER_DELIVERY_RETRY_MAX_SECONDS=0)
def test_a_delivery_with_redis_down_stays_pending_and_is_delivered_once_when_it_returns(
    redis_server: RedisServer, operator: Any, operator_client: Any, django_user_model: Any
) -> None:
    users = [django_user_model.objects.create(username=f"reader{i}") for i in range(3)]
    user_ids = [u.pk for u in users]
    redis_server.stop(keep_data=True)

    payload = {"category": "system", "title": "Outage", "body_html": "<p>x</p>", "to": {"users": user_ids}}
    response = operator_client.post("/api/v1/manage/messages/", payload, format="json")
    assert response.status_code == 202, response.content
    message = Message.objects.get(pk=response.json()["id"])
    assert _pending(message) == [(messages.DELIVER_TASK, 0)]

    # However long the outage: every relay fails and the row stays (no give-up).
    for _ in range(12):
        reset_breakers()  # each run meets the dead server itself, as after each cooldown
        assert delivery.delivery_relay(inline=True) == 0
    row = PendingDelivery.objects.get(object_id=message.pk)
    assert row.attempts >= 12
    assert Message.objects.get(pk=message.pk).status == MessageStatus.QUEUED

    redis_server.start()
    reset_breakers()
    # The delivery (in this process, without a broker, it pushes both chunks itself).
    assert delivery.delivery_relay(inline=True) == 1
    assert _pending(message) == []
    message.refresh_from_db()
    assert message.status == MessageStatus.DELIVERED
    assert sorted(FanoutChunk.objects.filter(message=message).values_list("index", "size")) == [(0, 2), (1, 1)]
    _assert_delivered_once(message, user_ids)

    # Running the work again (a redelivered task, a second relay) changes nothing.
    delivery.delivery_run(task=messages.DELIVER_TASK, object_id=message.pk)
    delivery.delivery_run(task=messages.FANOUT_CHUNK_TASK, object_id=message.pk, index=0)
    _assert_delivered_once(message, user_ids)
    assert _pending(message) == []


@pytest.mark.redis_server
@override_settings(MESSAGECENTER_FANOUT_CHUNK=2)
def test_chunks_cut_off_by_an_outage_are_delivered_by_check_redis_repair(
    redis_server: RedisServer, operator: Any, django_user_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    users = [django_user_model.objects.create(username=f"reader{i}") for i in range(5)]
    user_ids = [u.pk for u in users]
    real = messages.inbox_deliver

    def redis_dies_first(**kwargs: Any) -> int:
        # Redis goes away between the message's detail and its fan-out.
        redis_server.stop(keep_data=True)
        monkeypatch.setattr(messages, "inbox_deliver", real)
        return real(**kwargs)

    monkeypatch.setattr(messages, "inbox_deliver", redis_dies_first)
    message = services.message_send(
        sender=operator, category="system", title="Cut off", body_html="<p>x</p>", user_ids=user_ids
    )
    chunk = messages.FANOUT_CHUNK_TASK
    assert _pending(message) == [(chunk, 0), (chunk, 1), (chunk, 2)]
    assert Message.objects.get(pk=message.pk).status == MessageStatus.DELIVERING
    assert not FanoutChunk.objects.filter(message=message).exists()

    redis_server.start()
    reset_breakers()
    call_command("check_redis", "--repair", "--area", "deliveries")
    assert _pending(message) == []
    message.refresh_from_db()
    assert message.status == MessageStatus.DELIVERED
    assert FanoutChunk.objects.filter(message=message).count() == 3
    _assert_delivered_once(message, user_ids)


@override_settings(MESSAGECENTER_FANOUT_CHUNK=2, MESSAGECENTER_DELIVERY_RETRY_MAX_SECONDS=0)
def test_a_planner_whose_chunk_publish_is_nacked_finishes_and_leaves_the_rest_to_the_relay(
    dead_broker: Celery, operator: Any, django_user_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A raw AMQP error (here a nacked publisher confirm, which kombu does not
    convert) on the second chunk's hand-over: the planner still ends, and the
    chunks not handed over are due again at once instead of after the lease."""
    users = [django_user_model.objects.create(username=f"reader{i}") for i in range(5)]
    user_ids = [u.pk for u in users]
    message = services.message_send(
        sender=operator, category="system", title="Nacked", body_html="<p>x</p>", user_ids=user_ids
    )
    assert _pending(message) == [(messages.DELIVER_TASK, 0)]  # the broker refused the planner too
    chunk_task = current_app.tasks[messages.FANOUT_CHUNK_TASK]
    handed: list[list[int]] = []

    def nack_the_second(*, args: list[int], **kwargs: Any) -> None:
        if handed:
            raise MessageNacked("basic.nack from the broker")
        handed.append(args)

    monkeypatch.setattr(chunk_task, "apply_async", nack_the_second)
    delivery.forget_local_state()
    before = timezone.now()
    assert delivery.delivery_run(task=messages.DELIVER_TASK, object_id=message.pk) == 3
    chunk = messages.FANOUT_CHUNK_TASK
    assert _pending(message) == [(chunk, 0), (chunk, 1), (chunk, 2)]  # the planner's own row is done
    assert handed == [[message.pk, 0]]
    rows = {row.index: row for row in PendingDelivery.objects.filter(object_id=message.pk)}
    lease = before + timedelta(seconds=settings.MESSAGECENTER_DELIVERY_LEASE_SECONDS)
    assert rows[0].attempts == 0
    assert rows[0].due_at >= lease  # handed over: waits for its task
    for index in (1, 2):
        assert rows[index].attempts == 1
        assert "MessageNacked" in rows[index].last_error
        assert rows[index].due_at < lease  # due again with the backoff, not the lease

    # The broker takes publishes again: the relay hands over just those two.
    monkeypatch.undo()
    dead_broker.conf.task_always_eager = True
    delivery.forget_local_state()
    assert delivery.delivery_relay() == 2
    assert _pending(message) == [(chunk, 0)]


# --- End to end: a real worker whose broker is the read model's Redis ----------------

OUTAGE_SECONDS = 5.0
# After Redis is back: the worker reconnects, the relay (beat's job, called here
# as beat would) hands the pending row over, the worker delivers.
RESUME_SECONDS = 30.0


@pytest.mark.celery_worker
@pytest.mark.redis_server
@pytest.mark.django_db(transaction=True)
def test_a_message_published_while_the_broker_redis_is_down_is_delivered_once_it_returns(
    redis_server: RedisServer, operator_client: Any, django_user_model: Any, tmp_path: Any
) -> None:
    users = [django_user_model.objects.create(username=f"reader{i}") for i in range(3)]
    user_ids = [u.pk for u in users]
    broker_url = redis_server.url.rsplit("/", 1)[0] + "/1"  # the broker on the read model's Redis
    queue = f"mc-test-{uuid.uuid4().hex[:12]}"
    db = settings.DATABASES["default"]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("CELERY_", "MESSAGECENTER_"))},
        "DJANGO_SETTINGS_MODULE": "config.settings.test_worker",
        "MESSAGECENTER_TEST_DATABASE_NAME": str(db["NAME"]),
        "MESSAGECENTER_TEST_CACHE_URL": redis_server.url,
        "MESSAGECENTER_TEST_QUEUE": queue,
        "MESSAGECENTER_KEY_PREFIX": str(settings.MESSAGECENTER_KEY_PREFIX),
        "CELERY_BROKER_URL": broker_url,
        "PYTHONUNBUFFERED": "1",
    }
    worker = Worker(name=f"w-{queue}", queue=queue, log=tmp_path / "worker.log", env=env)
    previous = current_app._get_current_object()
    app = Celery("redis-broker", set_as_current=False)
    app.config_from_object("django.conf:settings", namespace="CELERY")
    app.conf.broker_url = broker_url
    app.conf.task_always_eager = False
    app.conf.task_default_queue = queue
    app.set_current()
    delivery.forget_local_state()
    try:
        log = tmp_path / "worker.log"
        ready = time.monotonic() + 60
        while "ready." not in (log.read_text(errors="replace") if log.exists() else ""):
            assert worker.process.poll() is None, "the worker died"
            assert time.monotonic() < ready, "the worker did not start"
            time.sleep(0.1)
        redis_server.stop(keep_data=True)
        payload = {"category": "system", "title": "Outage", "body_html": "<p>x</p>", "to": {"users": user_ids}}
        started = time.monotonic()
        response = operator_client.post("/api/v1/manage/messages/", payload, format="json")
        assert response.status_code == 202, response.content
        assert time.monotonic() - started < PUBLISH_SECONDS
        message = Message.objects.get(pk=response.json()["id"])
        assert _pending(message) == [(messages.DELIVER_TASK, 0)]
        time.sleep(OUTAGE_SECONDS)
        assert _pending(message) == [(messages.DELIVER_TASK, 0)]

        redis_server.start()
        reset_breakers()
        back = time.monotonic()
        while not Message.objects.filter(pk=message.pk, status=MessageStatus.DELIVERED).exists():
            assert worker.process.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
            assert time.monotonic() - back < RESUME_SECONDS, (tmp_path / "worker.log").read_text()[-3000:]
            delivery.delivery_relay()
            time.sleep(0.5)
        resumed = time.monotonic() - back
        deadline = time.monotonic() + RESUME_SECONDS
        while _pending(message) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _pending(message) == []
        _assert_delivered_once(message, user_ids)
        print(f"delivered {resumed:.1f} s after Redis returned")
    finally:
        previous.set_current()
        delivery.forget_local_state()
        worker.stop()
