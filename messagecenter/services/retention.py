"""Retention: rows of items long expired leave PostgreSQL (a beat job).

A message or notification whose ``expire_at`` is more than
``MESSAGECENTER_RETENTION_DAYS`` in the past is purged with what hangs off it:
its audience rows (a message's groups), images, fan-out chunks, pending
delivery rows, and the hidden-item rows naming it. Pending rows and hidden
rows whose item is gone for any other reason (a bulletin deleted, a row
removed by hand) go too, and so do the ends of groups (``InboxGroupEnd``)
no item reaches any more: once no message or notification of a group key
is as old as an end, the end cuts nothing.

Work goes in batches of ``MESSAGECENTER_RETENTION_BATCH`` items, each batch its
own short transaction, so the job never holds many row locks or one long
transaction. The read model is trimmed through the projection
(``projection.items_purged``) before each batch's rows are deleted: Redis
never names a purged row, and a Redis failure stops the job until the next
run (every step is idempotent). Deleting goes around the model signals: they
would ask the read model to record a removal of an item it just forgot.
"""

from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connections, router, transaction
from django.db.models import Exists, Field, Min, Model, OuterRef
from django.utils import timezone

from messagecenter import projection
from messagecenter.items import message_entry, notification_entry
from messagecenter.models import (
    Bulletin,
    DeliveryMode,
    FanoutChunk,
    InboxGroupEnd,
    InboxHidden,
    InboxItemState,
    Message,
    MessageImage,
    MessageRecipient,
    MessageStatus,
    Notification,
    NotificationRecipient,
    PendingDelivery,
    RuleMatch,
)
from messagecenter.readmodel import publish, to_ms
from messagecenter.services.messages import DELIVER_TASK as MESSAGE_DELIVER_TASK
from messagecenter.services.messages import FANOUT_CHUNK_TASK as MESSAGE_CHUNK_TASK
from messagecenter.services.notifications import DELIVER_TASK as NOTIFICATION_DELIVER_TASK
from messagecenter.services.notifications import FANOUT_CHUNK_TASK as NOTIFICATION_CHUNK_TASK

MESSAGE_TASKS = (MESSAGE_DELIVER_TASK, MESSAGE_CHUNK_TASK)
NOTIFICATION_TASKS = (NOTIFICATION_DELIVER_TASK, NOTIFICATION_CHUNK_TASK)
_KINDS: dict[str, type[Model]] = {"m": Message, "n": Notification, "b": Bulletin}


def retention_purge(*, now: datetime | None = None, batch: int | None = None) -> dict[str, int]:
    """Purge what is past retention at ``now``; returns the counts that are not 0
    (messages, notifications, orphan pending and hidden rows, group ends, batches)."""
    now = now or timezone.now()
    batch = int(batch or settings.MESSAGECENTER_RETENTION_BATCH)
    cutoff = now - timedelta(days=float(settings.MESSAGECENTER_RETENTION_DAYS))
    done: Counter[str] = Counter()
    while _messages_batch(cutoff=cutoff, now=now, batch=batch, done=done):
        done["batches"] += 1
    while _notifications_batch(cutoff=cutoff, now=now, batch=batch, done=done):
        done["batches"] += 1
    done["pending"] += _orphan_pending(batch=batch)
    done["hidden"] += _orphan_hidden(now=now, batch=batch)
    done["group_ends"] += _spent_group_ends(batch=batch)
    return {name: count for name, count in done.items() if count}


def _hidden_of(refs: list[str]) -> list[tuple[int, str]]:
    # mc_hidden_item_idx serves this lookup by item.
    # A parked (archived or snoozed) item's ref sits in its user's hidden set
    # too, so its state row names a Redis entry to drop as well.
    pairs = {
        (int(u), str(r)) for u, r in InboxHidden.objects.filter(item_id__in=refs).values_list("user_id", "item_id")
    }
    pairs.update(
        (int(u), str(r)) for u, r in InboxItemState.objects.filter(item_id__in=refs).values_list("user_id", "item_id")
    )
    return sorted(pairs)


def _delete_where(model: type[Model], **among: Sequence[int | str]) -> int:
    """``DELETE FROM <model's table> WHERE <field> IN (...) AND ...``: one
    statement, without the model signals (see the module's docstring) and
    without Django's cascade collector (what hangs off a row is deleted here
    by name, first). Field names as in ``filter`` (``pk``, ``message_id``)."""
    if not all(among.values()):
        return 0
    connection = connections[router.db_for_write(model)]
    quote = connection.ops.quote_name
    clauses: list[str] = []
    params: list[int | str] = []
    for name, values in among.items():
        field = model._meta.pk if name == "pk" else model._meta.get_field(name)
        if not isinstance(field, Field) or not field.column:
            raise TypeError(f"{model.__name__}.{name} is not a column")
        clauses.append(f"{quote(field.column)} IN ({', '.join(['%s'] * len(values))})")
        params.extend(values)
    sql = f"DELETE FROM {quote(model._meta.db_table)} WHERE {' AND '.join(clauses)}"  # noqa: S608 (quoted names, values as parameters)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)


def _messages_batch(*, cutoff: datetime, now: datetime, batch: int, done: Counter[str]) -> int:
    # mc_message_status_idx serves this (status, expire_at) range. Messages
    # still being delivered wait for their delivery to end.
    rows = list(
        Message.objects.filter(expire_at__lte=cutoff)
        .exclude(status__in=[MessageStatus.QUEUED, MessageStatus.DELIVERING])
        .order_by("expire_at", "pk")
        .defer("body_html", "users_bitmap")[:batch]
    )
    if not rows:
        return 0
    size = int(settings.MESSAGECENTER_BITMAP_CHUNK_USERS)
    refs = [m.ref for m in rows]
    holders: set[int] = set()
    pull_members: list[str] = []
    chunks: dict[str, list[int]] = {}
    for message in rows:
        audience = message.audience
        if message.delivery == DeliveryMode.PULL:
            pull_members.append(publish.pull_member(message_entry(message), everyone=message.everyone))
            if audience:
                chunks[message.ref] = list(range(audience.min() // size, audience.max() // size + 1))
        else:
            holders.update(audience)
    projection.items_purged(
        refs=refs,
        members=[message_entry(m).member for m in rows],
        holders=sorted(holders),
        pull_members=pull_members,
        audience_chunks=chunks,
        hidden=_hidden_of(refs),
        now=now,
    )
    ids = [m.pk for m in rows]
    with transaction.atomic():
        _delete_where(InboxHidden, item_id=refs)
        _delete_where(InboxItemState, item_id=refs)
        _delete_where(PendingDelivery, task=MESSAGE_TASKS, object_id=ids)
        _delete_where(FanoutChunk, message_id=ids)
        _delete_where(MessageRecipient, message_id=ids)
        _delete_where(MessageImage, message_id=ids)
        _delete_where(Message.groups.through, message_id=ids)
        done["messages"] += _delete_where(Message, pk=ids)
    return len(rows)


def _notifications_batch(*, cutoff: datetime, now: datetime, batch: int, done: Counter[str]) -> int:
    rows = list(
        Notification.objects.filter(expire_at__lte=cutoff).order_by("expire_at", "pk").defer("body_html")[:batch]
    )
    if not rows:
        return 0
    refs = [n.ref for n in rows]
    holders: set[int] = set()
    for notification in rows:
        holders.update(notification.audience)
    projection.items_purged(
        refs=refs,
        members=[notification_entry(n).member for n in rows],
        holders=sorted(holders),
        pull_members=[],
        audience_chunks={},
        hidden=_hidden_of(refs),
        now=now,
    )
    ids = [n.pk for n in rows]
    with transaction.atomic():
        _delete_where(InboxHidden, item_id=refs)
        _delete_where(InboxItemState, item_id=refs)
        _delete_where(PendingDelivery, task=NOTIFICATION_TASKS, object_id=ids)
        _delete_where(NotificationRecipient, notification_id=ids)
        RuleMatch.objects.filter(notification_id__in=ids).update(notification=None)
        done["notifications"] += _delete_where(Notification, pk=ids)
    return len(rows)


def _orphan_pending(*, batch: int) -> int:
    """Pending delivery rows whose message or notification is gone: nothing left to deliver."""
    removed = 0
    kinds: tuple[tuple[tuple[str, ...], type[Model]], ...] = (
        (MESSAGE_TASKS, Message),
        (NOTIFICATION_TASKS, Notification),
    )
    for tasks, model in kinds:
        while True:
            # mc_pendingdelivery_unique (task, object_id, index) serves the scan by task.
            orphans = list(
                PendingDelivery.objects.filter(task__in=tasks)
                .exclude(Exists(model._default_manager.filter(pk=OuterRef("object_id"))))
                .values_list("pk", flat=True)[:batch]
            )
            if not orphans:
                break
            removed += _delete_where(PendingDelivery, pk=orphans)
    return removed


def _gone(refs: Iterable[str]) -> list[str]:
    """The refs (``m12``, ``n3``, ``b7``) whose row no longer exists."""
    by_kind: dict[str, set[int]] = {}
    for ref in refs:
        if ref[:1] in _KINDS and ref[1:].isdigit():
            by_kind.setdefault(ref[:1], set()).add(int(ref[1:]))
    gone = []
    for kind, ids in by_kind.items():
        present = set(_KINDS[kind]._default_manager.filter(pk__in=ids).values_list("pk", flat=True))
        gone += [f"{kind}{pk}" for pk in sorted(ids - present)]
    return gone


def _orphan_hidden(*, now: datetime, batch: int) -> int:
    """Hidden-item rows naming an item that is gone, walked by primary key in batches."""
    removed = 0
    last = 0
    while True:
        rows = list(InboxHidden.objects.filter(pk__gt=last).order_by("pk").values_list("pk", "item_id")[:batch])
        if not rows:
            return removed
        last = rows[-1][0]
        gone = _gone({ref for _, ref in rows})
        if gone:
            projection.items_purged(
                refs=[], members=[], holders=[], pull_members=[], audience_chunks={}, hidden=_hidden_of(gone), now=now
            )
            removed += _delete_where(InboxHidden, item_id=gone)


def _oldest_of_keys(keys: set[str]) -> dict[str, int]:
    """The time (ms) of the oldest message or notification of each key that has one."""
    oldest: dict[str, int] = {}
    for model in (Message, Notification):
        # mc_message_group_idx / mc_notification_group_idx serve this.
        rows = (
            model._default_manager.filter(group_key__in=keys)
            .order_by()
            .values("group_key")
            .annotate(first=Min("created_at"))
            .values_list("group_key", "first")
        )
        for key, first in rows:
            oldest[key] = min(oldest.get(key, to_ms(first)), to_ms(first))
    return oldest


def _spent_group_ends(*, batch: int) -> int:
    """Group ends older than every item of their key left (those items were
    purged): an end cuts the key's items at its time, and no item is at or
    before it any more, nor can one come (items are created now). Walked by
    primary key in batches; Redis's copies are harmless for the same reason
    and go with the next rebuild."""
    removed = 0
    last = 0
    while True:
        rows = list(
            InboxGroupEnd.objects.filter(pk__gt=last).order_by("pk").values_list("pk", "group_key", "until_ms")[:batch]
        )
        if not rows:
            return removed
        last = rows[-1][0]
        oldest = _oldest_of_keys({key for _, key, _ in rows})
        spent = [pk for pk, key, until in rows if key not in oldest or until < oldest[key]]
        if spent:
            removed += _delete_where(InboxGroupEnd, pk=spent)
