"""Typed notifications: message types, subscriptions per scope, and
notifications fanned out to the subscribers at send time.

A notification is stored once in PostgreSQL (with its send-time audience as a
roaring bitmap) and pushed into each recipient's inbox (kind
``notification``, ref ``n<id>``) by chunked Celery tasks after commit. It
expires exactly at ``expire_at`` (the inbox filters by time on every read);
``notification_sweep`` frees Redis afterwards.

Subscriptions of a group are resolved to the group's members when a
notification is sent: someone joining later does not receive earlier ones,
someone leaving keeps what they received.
"""

import math
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django.db import IntegrityError, models, transaction
from django.utils import timezone
from pyroaring import BitMap

from core.api.errors import Conflict, LimitExceeded, ValidationFailed
from core.api.translations import translations_validate
from core.html import sanitize_html
from durability import healing
from messagecenter import projection
from messagecenter.items import notification_detail, notification_entry
from messagecenter.models import (
    CATEGORIES,
    MessageType,
    Notification,
    NotificationRule,
    Subscription,
    UserGroup,
    UserGroupMembership,
)
from messagecenter.readmodel import notifications as notifications_rm
from messagecenter.readmodel import publish, to_ms
from messagecenter.selectors import muted_among
from messagecenter.services.channels.plan import ChannelRequest, channels_plan
from messagecenter.services.delivery import Job, delivery_add
from messagecenter.services.grouping import group_fields_clean, group_item_removed
from messagecenter.services.recipients import recipients_add
from messagecenter.services.slots import slot_allocate
from webhooks import services as webhooks

MAX_TTL_SECONDS = 366 * 24 * 60 * 60  # a year and a day: anything longer is a mistake
MAX_SCOPE_LENGTH = 100
SWEEP_USERS_BATCH = 500
SWEEP_ITEMS_LIMIT = 1000
SWEEP_DETAILS_BATCH = 500
# Tasks of messagecenter.tasks, sent by name: the tasks import these services.
DELIVER_TASK = "messagecenter.notification_deliver"
FANOUT_CHUNK_TASK = "messagecenter.notification_fanout_chunk"


def _invalid(field: str, message: str, code: str = "invalid") -> ValidationFailed:
    return ValidationFailed(message, code=code, fields={field: [message]})


def _scope(scope: Any) -> str:
    if not isinstance(scope, str) or not scope.strip():
        raise _invalid("scope", "A scope is required.")
    scope = scope.strip()
    if len(scope) > MAX_SCOPE_LENGTH:
        raise _invalid("scope", f"At most {MAX_SCOPE_LENGTH} characters.")
    return scope


def _ttl(ttl_seconds: Any) -> int:
    # bool is an int in Python; a JSON true is not a TTL.
    if isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, int):
        raise _invalid("ttl_seconds", "ttl_seconds must be a whole number of seconds.", "invalid_ttl")
    if not 0 < ttl_seconds <= MAX_TTL_SECONDS:
        raise _invalid("ttl_seconds", f"ttl_seconds must be between 1 and {MAX_TTL_SECONDS}.", "invalid_ttl")
    return ttl_seconds


def message_type_get(*, code: Any) -> MessageType:
    message_type = MessageType.objects.filter(code=code).first() if isinstance(code, str) else None
    if message_type is None:
        raise _invalid("message_type", f"Unknown message type {code!r}.", "unknown_message_type")
    return message_type


def message_type_create(
    *,
    code: str,
    name: str,
    category: str = "system",
    default_ttl_seconds: int | None = None,
    self_service: bool = False,
) -> MessageType:
    if category not in CATEGORIES:
        raise _invalid("category", f"Choose from {', '.join(CATEGORIES)}.", "invalid_category")
    ttl = _ttl(default_ttl_seconds) if default_ttl_seconds is not None else int(settings.MESSAGECENTER_NOTIFICATION_TTL)
    try:
        with transaction.atomic():
            return MessageType.objects.create(
                code=code, name=name, category=category, default_ttl_seconds=ttl, self_service=bool(self_service)
            )
    except IntegrityError as exc:
        raise ValidationFailed(
            f"A message type {code!r} exists already.", code="duplicate", fields={"code": ["This code is taken."]}
        ) from exc


def subscription_create(
    *, message_type: str, scope: str, user_id: int | None = None, group_id: int | None = None
) -> Subscription:
    """Subscribe exactly one user or one group. Unknown type, user or group is
    a 400; the same subscription twice is a 409 (Conflict)."""
    if (user_id is None) == (group_id is None):
        raise ValidationFailed(
            "Give exactly one of user or group.",
            code="invalid_subscriber",
            fields={"user": ["Give exactly one of user or group."], "group": ["Give exactly one of user or group."]},
        )
    mtype = message_type_get(code=message_type)
    scope = _scope(scope)
    if user_id is not None and not get_user_model().objects.filter(pk=user_id).exists():
        raise _invalid("user", f"Unknown user id {user_id}.", "unknown_user")
    if group_id is not None and not UserGroup.objects.filter(pk=group_id).exists():
        raise _invalid("group", f"Unknown group id {group_id}.", "unknown_group")
    try:
        with transaction.atomic():
            # The post_save receiver asks for the subscriber set's projection after commit.
            return Subscription.objects.create(message_type=mtype, scope=scope, user_id=user_id, group_id=group_id)
    except IntegrityError as exc:
        raise Conflict("This subscription exists already.", code="duplicate") from exc


def subscription_delete(*, subscription: Subscription) -> None:
    with transaction.atomic():
        subscription.delete()  # post_delete asks for the subscriber set's projection


def subscription_audience(*, message_type: MessageType, scope: str) -> BitMap:
    """Distinct user ids subscribed now: directly, or through a group's members."""
    rows = list(Subscription.objects.filter(message_type=message_type, scope=scope).values_list("user_id", "group_id"))
    audience = BitMap(int(u) for u, _g in rows if u is not None)
    group_ids = [g for _u, g in rows if g is not None]
    if group_ids:
        audience |= BitMap(
            UserGroupMembership.objects.filter(group_id__in=group_ids).values_list("user_id", flat=True).distinct()
        )
    return audience


def notification_send(
    *,
    message_type: str,
    scope: str,
    title: str,
    body_html: str,
    ttl_seconds: int | None = None,
    source: models.Model | None = None,
    rule: NotificationRule | None = None,
    channels: ChannelRequest | None = None,
    translations: Mapping[str, Any] | None = None,
    group_key: str = "",
    actor: str = "",
) -> Notification:
    """Raise a notification for every subscriber of ``message_type`` in ``scope``
    (and, with ``channels``, by Web Push and e-mail: ``services.channels``).

    Validates everything before writing (nothing changes on error), stores the
    row with its send-time audience and enqueues the fan-out after commit.
    ``recipients`` counts distinct users (direct and group subscriptions of
    the same user count once). The default TTL is the type's.
    """
    mtype = message_type_get(code=message_type)
    scope = _scope(scope)
    if not isinstance(title, str) or not title.strip():
        raise _invalid("title", "A title is required.")
    ttl = _ttl(ttl_seconds) if ttl_seconds is not None else int(mtype.default_ttl_seconds)
    localized = translations_validate(translations) if translations is not None else {}
    group_key, actor = group_fields_clean(group_key=group_key, actor=actor)
    now = timezone.now()
    body = sanitize_html(body_html)
    with transaction.atomic():
        audience = subscription_audience(message_type=mtype, scope=scope)
        if audience and audience.max() > int(settings.MESSAGECENTER_MAX_USER_ID):
            raise LimitExceeded("A user id is beyond MESSAGECENTER_MAX_USER_ID; bitmaps cannot address it.")
        month, offset = slot_allocate(at=now)
        notification = Notification.objects.create(
            message_type=mtype,
            scope=scope,
            category=mtype.category,
            title=title.strip()[:200],
            body_html=body,
            created_at=now,
            expire_at=now + timedelta(seconds=ttl),
            recipients=len(audience),
            audience_bitmap=audience.serialize() if audience else b"",
            rule=rule,
            source_type=ContentType.objects.get_for_model(source) if source is not None else None,
            source_id=str(source.pk) if source is not None else "",
            slot_month=month,
            slot_offset=offset,
            translations=localized,
            group_key=group_key,
            actor=actor,
        )
        # Committed with the notification, sent to its task after commit (services.delivery).
        delivery_add(task=DELIVER_TASK, object_id=notification.pk)
        notification_sent_emit(notification)
        if channels is not None:
            channels_plan(
                item_id=notification.ref, category=notification.category, request=channels, created_at=now, sent=True
            )
    return notification


def notification_sent_emit(notification: Notification) -> None:
    """The ``notification.sent`` webhook event, in the transaction that sends it."""
    webhooks.webhook_emit(
        event="notification.sent",
        data={
            "id": str(notification.pk),
            "message_type": notification.message_type.code,
            "scope": notification.scope,
            "title": notification.title,
            "recipients": notification.recipients,
        },
    )


def _chunk_count(notification: Notification) -> int:
    return math.ceil(notification.recipients / int(settings.MESSAGECENTER_FANOUT_CHUNK))


def notification_deliver(*, notification: Notification, now: datetime | None = None) -> int:
    """Store the detail once and enqueue one task per audience chunk.
    Idempotent; returns the number of chunks (0 when withdrawn or expired)."""
    now = now or timezone.now()
    if notification.withdrawn or notification.expire_at <= now:
        return 0
    publish.item_detail_put(ref=notification.ref, detail=notification_detail(notification))
    chunks = _chunk_count(notification)
    delivery_add(task=FANOUT_CHUNK_TASK, object_id=notification.pk, indexes=range(chunks))
    _undo_if_withdrawn(notification)
    return chunks


def _undo_if_withdrawn(notification: Notification) -> None:
    """A withdrawal that committed while this task wrote may have removed the
    item before our write landed: remove it again (idempotent)."""
    if Notification.objects.filter(pk=notification.pk, withdrawn=True).exists():
        publish.item_remove(entry=notification_entry(notification))


def _unmuted(notification: Notification, user_ids: list[int]) -> list[int]:
    """The recipients who had not muted the notification's type or category
    when it was raised (messagecenter.mutes: the item's time decides)."""
    muted = muted_among(
        user_ids=user_ids,
        category=notification.category,
        time_ms=to_ms(notification.created_at),
        message_type_id=notification.message_type_id,
    )
    return [u for u in user_ids if u not in muted] if muted else user_ids


def notification_fanout_chunk(*, notification: Notification, index: int, now: datetime | None = None) -> int:
    """Push one chunk of the audience. Running it twice changes nothing (ZADD NX
    in the inbox and in the sweep index). Returns the users of the chunk."""
    now = now or timezone.now()
    if notification.withdrawn or notification.expire_at <= now:
        return 0
    size = int(settings.MESSAGECENTER_FANOUT_CHUNK)
    chunk = list(notification.audience[index * size : (index + 1) * size])
    # PostgreSQL first: a user's fill finds the notification by these rows
    # (and applies the user's mutes itself).
    recipients_add(item=notification, user_ids=chunk)
    user_ids = _unmuted(notification, chunk)
    # The inboxes and each recipient's notification zset in the same script
    # calls (deliver.lua), then the holders index the sweep walks.
    publish.inbox_deliver(
        entry=notification_entry(notification),
        user_ids=user_ids,
        now_ms=to_ms(now),
        notification=True,
        held_only=healing.enabled(),
    )
    _undo_if_withdrawn(notification)
    return len(user_ids)


def notification_deliver_job(notification_id: int, _index: int) -> int:
    """A pending delivery's row: reload the notification and deliver it (0 when gone)."""
    notification = Notification.objects.filter(pk=notification_id).first()
    return 0 if notification is None else notification_deliver(notification=notification)


def notification_fanout_chunk_job(notification_id: int, index: int) -> int:
    """A pending chunk's row: reload the notification and push the chunk (0 when gone)."""
    notification = Notification.objects.filter(pk=notification_id).first()
    return 0 if notification is None else notification_fanout_chunk(notification=notification, index=index)


# What runs each task's pending rows (registered with services.delivery): task -> (job, takes an index).
DELIVERY_JOBS: dict[str, tuple[Job, bool]] = {
    DELIVER_TASK: (notification_deliver_job, False),
    FANOUT_CHUNK_TASK: (notification_fanout_chunk_job, True),
}


def notification_withdraw(*, notification: Notification) -> bool:
    """Remove from every inbox at once (like a message retraction); False if
    it was withdrawn already. The row stays for the record."""
    with transaction.atomic():
        locked = Notification.objects.select_for_update().get(pk=notification.pk)
        if locked.withdrawn:
            return False
        # The post_save receiver asks for its removal from Redis after commit.
        locked.withdrawn = True
        locked.withdrawn_at = timezone.now()
        locked.save(update_fields=["withdrawn", "withdrawn_at"])
        group_item_removed(group_key=locked.group_key, audience=locked.audience)
    notification.refresh_from_db()
    return True


def notification_sweep(*, now: datetime | None = None) -> dict[str, int]:
    """The expiry job (Celery beat ``messagecenter.notifications_sweep``).

    Inboxes already hide a notification exactly at ``expire_at``; this frees
    Redis: each holder's expired members leave the inbox and the per-user
    zset (ZREMRANGEBYSCORE, bounded calls, holders walked with SSCAN), and
    the stored-once details of expired notifications are dropped.
    """
    now = now or timezone.now()
    visited, removed = notifications_rm.notifications_sweep(
        now_ms=to_ms(now), batch=SWEEP_USERS_BATCH, limit=SWEEP_ITEMS_LIMIT
    )
    freed = notification_details_free(now=now)
    return {"users": visited, "removed": removed, "details_freed": freed}


def notification_details_free(*, now: datetime | None = None) -> int:
    """Drop the stored-once details of notifications expired by ``now`` and
    re-form the groups whose rows they were; returns how many."""
    now = now or timezone.now()
    freed = 0
    while True:
        # mc_notification_expire_idx serves this (partial on details_freed = false).
        rows = Notification.objects.filter(details_freed=False, expire_at__lte=now)
        batch = list(rows.order_by("expire_at").values_list("pk", flat=True)[:SWEEP_DETAILS_BATCH])
        if not batch:
            return freed
        publish.pull_expired_drop(pull_members=[], refs=[f"n{pk}" for pk in batch], audience_chunks={})
        Notification.objects.filter(pk__in=batch).update(details_freed=True)
        freed += len(batch)
        # Until now an expired row hid its group's older items.
        for grouped in (
            Notification.objects.filter(pk__in=batch).exclude(group_key="").only("group_key", "audience_bitmap")
        ):
            group_item_removed(group_key=grouped.group_key, audience=grouped.audience)


def notification_rebuild() -> dict[str, int]:
    """Restore subscriber sets from PostgreSQL (idempotent): what users share.
    Each user's notifications, and their details, come back with the user's
    fill."""
    pairs = set(Subscription.objects.values_list("message_type_id", "scope"))
    for type_id, scope in pairs:
        projection.subscribers(type_id, scope)
    return {"subscriptions": len(pairs)}
