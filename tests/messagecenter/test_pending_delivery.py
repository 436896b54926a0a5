"""Pending deliveries (messagecenter/services/delivery.py): rows committed with
the work, backoff capped at a few seconds, one row per task and chunk."""

from datetime import timedelta
from typing import Any

import pytest
from django.db import OperationalError, transaction
from django.utils import timezone
from redis.exceptions import ConnectionError as RedisConnectionError

from messagecenter import keys as mc_keys
from messagecenter import services
from messagecenter.items import message_entry, notification_entry
from messagecenter.models import Message, MessageStatus, PendingDelivery
from messagecenter.services import delivery, messages, notifications

pytestmark = pytest.mark.django_db(transaction=True)


def _send(operator: Any, recipient: Any) -> Message:
    return services.message_send(
        sender=operator, category="system", title="t", body_html="<p>b</p>", user_ids=[recipient.pk]
    )


def test_a_rolled_back_publish_leaves_no_pending_delivery(operator: Any, recipient: Any) -> None:
    written: list[int] = []

    def publish_then_fail() -> None:
        with transaction.atomic():
            _send(operator, recipient)
            written.append(PendingDelivery.objects.count())  # written with the message
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        publish_then_fail()
    assert written == [1]
    assert not PendingDelivery.objects.exists()
    assert not Message.objects.exists()


def test_a_delivery_that_keeps_failing_stays_due_within_a_few_seconds(
    operator: Any, recipient: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.MESSAGECENTER_DELIVERY_RETRY_MAX_SECONDS = 4.0

    def down(**kwargs: Any) -> None:
        raise RedisConnectionError("Redis went away")

    monkeypatch.setattr(messages.publish, "item_detail_put", down)
    message = _send(operator, recipient)
    for _ in range(20):
        assert delivery.delivery_run(task=messages.DELIVER_TASK, object_id=message.pk) == 0
    row = PendingDelivery.objects.get(object_id=message.pk)
    assert row.attempts == 22  # the publish's own try, its task's, then the twenty above
    assert "Redis went away" in row.last_error
    # No exponential growth into minutes: due again within the cap.
    assert row.due_at <= timezone.now() + timedelta(seconds=4)
    assert Message.objects.get(pk=message.pk).status == MessageStatus.QUEUED

    monkeypatch.undo()
    assert delivery.delivery_relay(inline=True, due_only=False) == 1
    assert not PendingDelivery.objects.exists()
    assert Message.objects.get(pk=message.pk).status == MessageStatus.DELIVERED


def test_a_database_error_in_the_work_keeps_the_row_due_with_the_backoff_not_the_lease(
    operator: Any, recipient: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deadlock or a dropped connection is an outage, not a bug: the row is
    tried again within seconds, as after a Redis error."""
    settings.MESSAGECENTER_DELIVERY_RETRY_MAX_SECONDS = 4.0
    settings.MESSAGECENTER_DELIVERY_LEASE_SECONDS = 300.0

    def deadlocked(**kwargs: Any) -> None:
        raise OperationalError("deadlock detected")

    monkeypatch.setattr(messages.publish, "item_detail_put", deadlocked)
    message = _send(operator, recipient)
    assert delivery.delivery_run(task=messages.DELIVER_TASK, object_id=message.pk) == 0
    row = PendingDelivery.objects.get(object_id=message.pk)
    assert "deadlock detected" in row.last_error
    assert row.due_at <= timezone.now() + timedelta(seconds=4)

    # A bug is different: kept for an operator, tried again only after the lease.
    def broken(**kwargs: Any) -> None:
        raise ValueError("cannot render")

    monkeypatch.setattr(messages.publish, "item_detail_put", broken)
    with pytest.raises(ValueError, match="cannot render"):
        delivery.delivery_run(task=messages.DELIVER_TASK, object_id=message.pk)
    row.refresh_from_db()
    assert row.due_at >= timezone.now() + timedelta(seconds=290)

    monkeypatch.undo()
    assert delivery.delivery_relay(inline=True, due_only=False) == 1
    assert Message.objects.get(pk=message.pk).status == MessageStatus.DELIVERED


def test_rows_are_written_once_however_many_and_however_often(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # No hand-over after commit: the rows alone are looked at.
    monkeypatch.setattr(delivery, "_hand_over", lambda *_args: None)
    chunks = list(range(2 * delivery.INSERT_BATCH + 7))  # more rows than one INSERT carries
    before = timezone.now()
    with transaction.atomic():
        delivery.delivery_add(task=messages.FANOUT_CHUNK_TASK, object_id=42, indexes=chunks)
    with transaction.atomic():  # a rerun: the rows are there already
        delivery.delivery_add(task=messages.FANOUT_CHUNK_TASK, object_id=42, indexes=[0, 5, len(chunks)])
    rows = PendingDelivery.objects.filter(task=messages.FANOUT_CHUNK_TASK, object_id=42).order_by("index")
    assert [row.index for row in rows] == [*chunks, len(chunks)]
    lease = timedelta(seconds=float(settings.MESSAGECENTER_DELIVERY_LEASE_SECONDS))
    for row in rows:
        assert (row.attempts, row.last_error) == (0, "")
        assert before <= row.created_at <= timezone.now()
        # Read back through the ORM as an aware time, leased as a hand-over's would be.
        assert before + lease <= row.due_at <= timezone.now() + lease


def test_an_unknown_task_is_refused_before_anything_is_written() -> None:
    with pytest.raises(ValueError, match="No delivery job"):
        delivery.delivery_add(task="messagecenter.nothing", object_id=1)
    assert not PendingDelivery.objects.exists()


def test_without_a_broker_the_next_publish_relays_what_failed_before(
    operator: Any, recipient: Any, settings: Any, monkeypatch: pytest.MonkeyPatch, redis: Any
) -> None:
    settings.MESSAGECENTER_DELIVERY_RETRY_MAX_SECONDS = 0.0
    message_type = services.message_type_create(code="stock", name="Stock")
    services.subscription_create(message_type=message_type.code, scope="WH1", user_id=recipient.pk)

    def down(**kwargs: Any) -> None:
        raise RedisConnectionError("Redis went away")

    monkeypatch.setattr(notifications.publish, "item_detail_put", down)
    notification = services.notification_send(message_type="stock", scope="WH1", title="Low", body_html="<p>x</p>")
    assert list(PendingDelivery.objects.values_list("task", "object_id")) == [
        (notifications.DELIVER_TASK, notification.pk)
    ]
    monkeypatch.undo()

    # Redis is back; no beat runs here: the next publish takes the backlog
    # along, the notification's delivery and then the chunk it adds.
    message = _send(operator, recipient)
    assert not PendingDelivery.objects.exists()
    members = redis.zrange(mc_keys.inbox(recipient.pk), 0, -1)
    assert sorted(members) == sorted(
        [notification_entry(notification).member.encode(), message_entry(message).member.encode()]
    )


def test_a_worker_killed_mid_task_leaves_its_row_due_after_the_run_lease(
    operator: Any, recipient: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that dies while it runs a row's task (SIGKILL: no error
    handling runs) leaves the task unacknowledged on a Redis broker for the
    visibility timeout; the relay must hand the row over again after the
    short run lease, not after the lease that covers a wait in the queue."""
    settings.MESSAGECENTER_DELIVERY_LEASE_SECONDS = 300.0
    settings.MESSAGECENTER_DELIVERY_RUN_LEASE_SECONDS = 15.0

    class Killed(BaseException):
        """The worker process dying: nothing after this point runs."""

    def killed_mid_task(**kwargs: Any) -> None:
        raise Killed

    monkeypatch.setattr(messages.publish, "item_detail_put", killed_mid_task)
    with transaction.atomic():
        message = _send(operator, recipient)
        # Handed to a broker: the hand-over's lease covers the queue.
        monkeypatch.setattr(delivery, "_eager", lambda: False)
        monkeypatch.setattr(delivery, "_send", lambda task, rows: True)
    queued = PendingDelivery.objects.get(object_id=message.pk)
    assert queued.due_at > timezone.now() + timedelta(seconds=200)

    started = timezone.now()
    with pytest.raises(Killed):
        delivery.delivery_run(task=messages.DELIVER_TASK, object_id=message.pk)
    row = PendingDelivery.objects.get(object_id=message.pk)
    assert started + timedelta(seconds=14) <= row.due_at <= timezone.now() + timedelta(seconds=15)

    # The beat relay finds it due once the run lease is out and hands it over again.
    handed: list[tuple[str, Any]] = []
    # append()'s None, or'd with True: record the call and answer True.
    monkeypatch.setattr(delivery, "_send", lambda task, rows: handed.append((task, list(rows))) or True)  # type: ignore[func-returns-value]
    monkeypatch.setattr(delivery, "_read_model_answers", lambda: True)
    assert delivery.delivery_relay() == 0  # not yet
    monkeypatch.setattr(delivery.timezone, "now", lambda: started + timedelta(seconds=16))
    assert delivery.delivery_relay() == 1
    assert handed == [(messages.DELIVER_TASK, [(message.pk, 0)])]


def test_a_started_row_vouches_for_the_rows_sent_before_it(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The queue is first in, first out: when a worker starts a row, a row of
    the same task sent before it that no worker started was lost (popped by a
    worker killed before it recorded the message, or held by a dead worker).
    Its lease is cut to the run lease, so the relay hands it over again within
    seconds instead of minutes; rows sent after it, rows already started,
    failed rows and other tasks keep theirs."""
    settings.MESSAGECENTER_DELIVERY_LEASE_SECONDS = 300.0
    settings.MESSAGECENTER_DELIVERY_RUN_LEASE_SECONDS = 15.0

    class Killed(BaseException):
        """The worker process dying mid-task: the row stays."""

    def killed(object_id: int, index: int) -> int:
        raise Killed

    monkeypatch.setattr(delivery, "_jobs", dict(delivery._jobs))
    delivery.register("tests.chunk", killed, chunked=True)
    delivery.register("tests.other", killed, chunked=True)
    monkeypatch.setattr(delivery, "_eager", lambda: False)
    monkeypatch.setattr(delivery, "_send", lambda task, rows: True)
    with transaction.atomic():
        delivery.delivery_add(task="tests.other", object_id=9, indexes=[0])
    with transaction.atomic():
        delivery.delivery_add(task="tests.chunk", object_id=1, indexes=range(6))
    real_now, later = timezone.now, timezone.now() + timedelta(seconds=1)
    monkeypatch.setattr(timezone, "now", lambda: later)  # the next batch is handed over a second later
    with transaction.atomic():
        delivery.delivery_add(task="tests.chunk", object_id=2, indexes=range(2))
    monkeypatch.setattr(timezone, "now", real_now)

    def run(object_id: int, index: int) -> None:
        with pytest.raises(Killed):
            delivery.delivery_run(task="tests.chunk", object_id=object_id, index=index)

    def soon() -> set[tuple[str, int, int]]:
        limit = timezone.now() + timedelta(seconds=16)
        return {(row.task, row.object_id, row.index) for row in PendingDelivery.objects.all() if row.due_at <= limit}

    run(1, 1)  # a worker started chunk 1 long ago
    PendingDelivery.objects.filter(task="tests.chunk", object_id=1, index=2).update(
        attempts=1, due_at=timezone.now() + timedelta(seconds=300)
    )  # chunk 2 failed on a bug: an operator's, due after the whole lease
    assert soon() == {("tests.chunk", 1, 0), ("tests.chunk", 1, 1)}

    run(1, 4)
    assert soon() == {("tests.chunk", 1, i) for i in (0, 1, 3, 4)}

    run(2, 1)  # the next batch's start vouches for the end of the one before
    assert soon() == {("tests.chunk", 1, i) for i in (0, 1, 3, 4, 5)} | {("tests.chunk", 2, 0), ("tests.chunk", 2, 1)}
    untouched = PendingDelivery.objects.get(task="tests.other")
    assert untouched.due_at > timezone.now() + timedelta(seconds=200)
    assert PendingDelivery.objects.get(task="tests.chunk", object_id=1, index=2).due_at > timezone.now() + timedelta(
        seconds=200
    )
