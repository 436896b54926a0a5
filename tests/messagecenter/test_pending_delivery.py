"""Pending deliveries (messagecenter/services/delivery.py): rows committed with
the work, backoff capped at a few seconds, one row per task and chunk."""

from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone
from redis.exceptions import ConnectionError as RedisConnectionError

from core import keys
from messagecenter import services
from messagecenter.items import message_entry, notification_entry
from messagecenter.models import Message, MessageStatus, PendingDelivery
from messagecenter.services import delivery, messages, notifications

pytestmark = pytest.mark.django_db


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
    members = redis.zrange(keys.mc_inbox(recipient.pk), 0, -1)
    assert sorted(members) == sorted(
        [notification_entry(notification).member.encode(), message_entry(message).member.encode()]
    )
