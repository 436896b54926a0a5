"""Retention (messagecenter/services/retention.py): items long expired leave
PostgreSQL in short batches, with their audiences, chunks, pending and hidden
rows, and the read model forgets them first: afterwards no Redis key, member
or field names a purged item, and the drift check finds nothing.

Retention is three seconds here (MESSAGECENTER_RETENTION_DAYS = 3/86400) and
time moves under time-machine rather than by waiting: the services, the Lua
scripts (which are handed the time) and the drift check all read Python's
clock, the one the purge reads.
"""

from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
from django.utils import timezone
from redis.exceptions import RedisError
from time_machine import TimeMachineFixture

from core.redis import get_redis
from durability import healing
from durability.drift import check_run
from messagecenter import selectors, services
from messagecenter.models import (
    FanoutChunk,
    InboxGroupEnd,
    InboxHidden,
    InboxItemState,
    Message,
    MessageRecipient,
    Notification,
    NotificationRecipient,
    PendingDelivery,
)
from messagecenter.services.messages import DELIVER_TASK
from tests.fixtures.readmodel import keyspace_scan
from tests.messagecenter.conftest import send

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _settings(settings: Any) -> None:
    settings.MESSAGECENTER_CHECK_GRACE_SECONDS = 0
    settings.MESSAGECENTER_PUSH_THRESHOLD = 2  # three users or everyone: pull
    settings.MESSAGECENTER_RETENTION_DAYS = 3 / 86400


def _names(ref: str, value: str) -> bool:
    return value == ref or value.startswith(f"{ref}|")


def redis_mentions(refs: set[str]) -> list[str]:
    """Every key, member or field of the run's read model that names one of ``refs``."""
    client = get_redis()
    found = []
    for raw in keyspace_scan(client):
        key = raw.decode()
        kind = client.type(raw).decode()
        values: list[str] = []
        if kind == "zset":
            values = [m.decode() for m in client.zrange(raw, 0, -1)]
        elif kind == "set":
            values = [m.decode() for m in client.smembers(raw)]
        elif kind == "hash":
            values = [f.decode() for f in client.hkeys(raw)]
        for ref in refs:
            if f":{ref}:" in key or key.endswith(f":{ref}"):
                found.append(key)
            found += [f"{key} {value}" for value in values if _names(ref, value)]
    return found


def test_purge_removes_what_is_past_retention_in_batches_and_redis_follows(
    operator: Any, recipient: Any, other_recipient: Any, outsider: Any, time_machine: TimeMachineFixture
) -> None:
    time_machine.move_to(timezone.now(), tick=False)
    start = timezone.now()
    soon = start + timedelta(seconds=4)
    old_push = [
        send(operator, to={"users": [recipient, other_recipient]}, title=f"old {i}", expire_at=soon) for i in range(3)
    ]
    # Before they expire: a hide, and a retraction (which puts the item in the
    # removed list as well).
    services.inbox_hide(user=other_recipient, item_id=old_push[0].ref)
    services.message_retract(message=old_push[1])
    # Parked items: their state rows and their entries in Redis go with them.
    services.inbox_archive(user=recipient, item_id=old_push[2].ref)
    services.inbox_snooze(user=other_recipient, item_id=old_push[2].ref, until=start + timedelta(hours=1))
    old_pull = send(operator, to={"everyone": True}, title="old, to everyone", expire_at=soon)
    # Expired when the purge runs, but not for longer than the retention.
    recent = send(operator, to={"users": [recipient]}, title="recent", expire_at=start + timedelta(seconds=8))
    forever = send(operator, to={"users": [recipient, other_recipient]}, title="never expires")
    assert {m.delivery for m in old_push} == {"push"}
    assert old_pull.delivery == "pull"
    assert FanoutChunk.objects.filter(message__in=old_push).count() == 3
    services.inbox_hide(user=recipient, item_id=forever.ref)
    services.inbox_archive(user=other_recipient, item_id=forever.ref)
    services.message_type_create(code="stock", name="Stock", default_ttl_seconds=3600)
    services.subscription_create(message_type="stock", scope="WH1", user_id=recipient.pk)
    services.subscription_create(message_type="stock", scope="WH1", user_id=outsider.pk)
    old_note = services.notification_send(message_type="stock", scope="WH1", title="old", body_html="", ttl_seconds=2)
    live_note = services.notification_send(message_type="stock", scope="WH1", title="live", body_html="")
    # Left behind by hand: a pending delivery of a message that is gone.
    PendingDelivery.objects.create(task=DELIVER_TASK, object_id=10**9, due_at=start)
    purged = {m.ref for m in [*old_push, old_pull]} | {old_note.ref}

    time_machine.shift(timedelta(seconds=8.5))
    # What beat did meanwhile: expired messages' stored-once data, expired notifications.
    services.message_cleanup_expired()
    services.notification_sweep()

    purge_at = timezone.now()
    done = services.retention_purge(now=purge_at, batch=2)

    assert done == {"messages": 4, "notifications": 1, "batches": 3, "pending": 1}
    assert set(Message.objects.values_list("pk", flat=True)) == {recent.pk, forever.pk}
    assert list(Notification.objects.values_list("pk", flat=True)) == [live_note.pk]
    assert not FanoutChunk.objects.exclude(message__in=[recent, forever]).exists()
    assert set(MessageRecipient.objects.values_list("message_id", flat=True)) == {recent.pk, forever.pk}
    assert set(NotificationRecipient.objects.values_list("notification_id", flat=True)) == {live_note.pk}
    assert Message.groups.through.objects.count() == 0
    assert list(InboxHidden.objects.values_list("user_id", "item_id")) == [(recipient.pk, forever.ref)]
    assert not PendingDelivery.objects.exists()
    assert list(InboxItemState.objects.values_list("user_id", "item_id")) == [(other_recipient.pk, forever.ref)]

    assert redis_mentions(purged) == []
    # What stays is still there.
    assert redis_mentions({forever.ref, live_note.ref})
    result = check_run(repair=False)
    assert result.error == ""
    assert result.drift_count == 0, [f.detail for a in result.areas for f in a.found]

    # Nothing left to do: a second run changes nothing.
    assert services.retention_purge(now=purge_at, batch=2) == {}


def test_hidden_rows_of_items_gone_otherwise_are_purged(operator: Any, recipient: Any) -> None:
    bulletin = services.bulletin_create(title="B", body_html="", display_time=timezone.now())
    services.inbox_hide(user=recipient, item_id=bulletin.ref)
    kept = send(operator, to={"users": [recipient]}, title="kept")
    services.inbox_hide(user=recipient, item_id=kept.ref)
    services.bulletin_delete(bulletin=bulletin)

    assert services.retention_purge() == {"hidden": 1}
    assert list(InboxHidden.objects.values_list("item_id", flat=True)) == [kept.ref]
    assert redis_mentions({bulletin.ref}) == []
    assert check_run(repair=False).drift_count == 0


def test_nothing_is_purged_within_retention(
    settings: Any, operator: Any, recipient: Any, time_machine: TimeMachineFixture
) -> None:
    settings.MESSAGECENTER_RETENTION_DAYS = 30
    time_machine.move_to(timezone.now(), tick=False)
    send(operator, to={"users": [recipient]}, title="expires at once", expire_at=timezone.now() + timedelta(seconds=1))
    time_machine.shift(timedelta(seconds=2))
    assert services.retention_purge() == {}
    assert Message.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_group_ends_go_once_no_item_of_their_key_is_as_old(
    operator: Any, recipient: Any, time_machine: TimeMachineFixture
) -> None:
    """An end cuts its key's items at its time: once retention purged every
    item of the key at or before it, it cuts nothing and goes (in batches);
    an end that an item left still reaches stays, and both paths keep
    grouping as before."""
    # The clock runs (each item its own ms, as in life), and jumps past the expiry below.
    time_machine.move_to(timezone.now(), tick=True)
    start = timezone.now()
    soon = start + timedelta(seconds=2)

    def grouped(title: str, key: str, **extra: Any) -> Any:
        return send(operator, to={"users": [recipient]}, title=title, group_key=key, **extra)

    # Key "a": two groups ended, every item expires.
    for title in ("a1", "a2"):
        services.inbox_mark_read(user=recipient, item_id=grouped(title, "a", expire_at=soon).ref)
    # Key "b": a group ended whose item never expires.
    kept = grouped("b1", "b")
    services.inbox_mark_read(user=recipient, item_id=kept.ref)
    assert sorted(InboxGroupEnd.objects.values_list("group_key", flat=True)) == ["a", "a", "b"]

    time_machine.shift(timedelta(seconds=5.5))
    services.message_cleanup_expired()
    done = services.retention_purge(now=timezone.now(), batch=1)

    assert done["group_ends"] == 2
    assert done["messages"] == 2
    assert list(InboxGroupEnd.objects.values_list("group_key", "row_ref")) == [("b", kept.ref)]
    # New items of both keys start new rows, the same with Redis up and down.
    fresh = [grouped("a3", "a"), grouped("b2", "b")]
    want = [
        (fresh[1].ref, {"key": "b", "count": 1, "actors": []}),
        (fresh[0].ref, {"key": "a", "count": 1, "actors": []}),
        (kept.ref, {"key": "b", "count": 1, "actors": []}),
    ]
    assert [(item.id, item.group) for item in selectors.inbox_list(user=recipient).results] == want
    with mock.patch.object(healing, "require_ready", side_effect=RedisError("down")):
        page = selectors.inbox_list(user=recipient)
    assert page.degraded
    assert [(item.id, item.group) for item in page.results] == want
    # Nothing left to do: a second run changes nothing.
    assert "group_ends" not in services.retention_purge(now=timezone.now(), batch=1)
