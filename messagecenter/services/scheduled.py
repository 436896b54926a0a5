"""Scheduled sends: messages and notifications stored now, sent at ``send_at``
(a message is scheduled by ``message_send(send_at=...)``).

A scheduled row reaches nobody: it has no slot (month 0), no audience bitmap
and no pending delivery, and every path to Redis (projection, rebuild, drift,
the PostgreSQL fallback) leaves it out. Its recipients are checked when it is
scheduled (unknown ones are a 400) and resolved again when it is sent (a
group's members then, as for an immediate send).

``scheduled_send_due`` (Celery beat, every ``MESSAGECENTER_SCHEDULED_SECONDS``)
sends what is due. Each row moves out of its scheduled state under a row lock
(``SELECT ... FOR UPDATE SKIP LOCKED``), in the transaction that writes its
slot, audience and pending delivery: two jobs never send one row twice, and a
cancel or edit waits for the lock and then finds it sent (409). From there on
the send is the ordinary one (``services.delivery``).
"""

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from pyroaring import BitMap

from core.api.errors import Conflict, LimitExceeded, ValidationFailed
from core.api.lookups import Whole
from core.api.translations import translations_validate
from core.html import sanitize_html, summarize
from messagecenter.models import (
    Message,
    MessageStatus,
    Notification,
)
from messagecenter.services.channels.plan import ChannelRequest, channels_plan, channels_release
from messagecenter.services.delivery import delivery_add
from messagecenter.services.grouping import group_fields_clean
from messagecenter.services.messages import (
    _deliver_on_commit,
    _members,
    _resolve,
    delivery_mode,
    message_sent_emit,
    send_at_check,
)
from messagecenter.services.notifications import (
    DELIVER_TASK,
    _invalid,
    _scope,
    _ttl,
    message_type_get,
    notification_sent_emit,
    notification_withdraw,
    subscription_audience,
)
from messagecenter.services.responses import actions_validate
from messagecenter.services.slots import slot_allocate

BATCH = 100


def _expiry_check(send_at: datetime, expire_at: datetime | None) -> None:
    if expire_at is not None and expire_at <= send_at:
        raise ValidationFailed("expire_at must be after send_at.", fields={"expire_at": ["Must be after send_at."]})


# --- Messages ----------------------------------------------------------------------


def _locked_scheduled_message(message: Message) -> Message:
    locked = Message.objects.select_for_update().get(pk=message.pk)
    if locked.status != MessageStatus.SCHEDULED:
        raise Conflict("The message is no longer scheduled (sent or cancelled).", code="not_scheduled")
    return locked


def message_schedule_update(*, message: Message, data: Mapping[str, Any]) -> Message:
    """Edit a scheduled message: title, summary, body_html, send_at, expire_at,
    ``to`` (users, groups, everyone), actions and translations (each replaced
    whole). 409 once it was sent or cancelled; validates everything before writing."""
    content = _content_changes(data)
    with transaction.atomic():
        locked = _locked_scheduled_message(message)
        send_at = send_at_check(data["send_at"]) if "send_at" in data else (locked.send_at or timezone.now())
        expire_at = data["expire_at"] if "expire_at" in data else locked.expire_at
        _expiry_check(send_at, expire_at)
        changes: dict[str, Any] = {"send_at": send_at, "created_at": send_at, "expire_at": expire_at, **content}
        groups = None
        if "to" in data:
            to = data["to"]
            everyone = bool(to.get("everyone", False))
            explicit, audience, groups = _resolve(
                user_ids=to.get("users") or [], group_ids=to.get("groups") or [], everyone=everyone
            )
            changes.update(
                everyone=everyone,
                users_bitmap=explicit.serialize() if explicit else b"",
                audience_size=None if everyone else len(audience),
                delivery=delivery_mode(everyone=everyone, size=len(audience)),
            )
        # A plain UPDATE: nothing of a scheduled message is in Redis to project.
        Message.objects.filter(pk=locked.pk).update(**changes)
        if groups is not None:
            locked.groups.set(groups)
    message.refresh_from_db()
    return message


def _content_changes(data: Mapping[str, Any]) -> dict[str, Any]:
    """The edit's title, summary, body, actions and translations, checked and cleaned."""
    changes: dict[str, Any] = {}
    if "title" in data:
        changes["title"] = data["title"]
    if "body_html" in data:
        changes["body_html"] = sanitize_html(data["body_html"])
        if "summary" not in data:
            changes["summary"] = summarize(changes["body_html"])
    if data.get("summary"):
        changes["summary"] = data["summary"]
    if "actions" in data:
        changes["actions"] = actions_validate(list(data["actions"])) if data["actions"] else []
    if "translations" in data:
        changes["translations"] = translations_validate(data["translations"])
    return changes


def _message_release(message: Message, now: datetime) -> None:
    """Send a locked scheduled message now: audience, slot, pending delivery."""
    explicit = message.explicit_users
    if explicit:
        # Users deleted since it was scheduled are dropped, not an error.
        explicit = BitMap(get_user_model().objects.filter(pk__any_of=Whole(explicit)).values_list("pk", flat=True))
    groups = list(message.groups.all())
    audience = BitMap() if message.everyone else explicit | _members(groups)
    if audience and audience.max() > int(settings.MESSAGECENTER_MAX_USER_ID):
        raise LimitExceeded("A user id is beyond MESSAGECENTER_MAX_USER_ID; bitmaps cannot address it.")
    month, offset = slot_allocate(at=now)
    changes: dict[str, Any] = {
        "status": MessageStatus.QUEUED,
        "created_at": now,
        "audience_bitmap": audience.serialize() if audience else b"",
        "audience_size": None if message.everyone else len(audience),
        "delivery": delivery_mode(everyone=message.everyone, size=len(audience)),
        "fanout_total": 0 if message.everyone else len(audience),
        "slot_month": month,
        "slot_offset": offset,
    }
    Message.objects.filter(pk=message.pk).update(**changes)
    for field, value in changes.items():
        setattr(message, field, value)
    _deliver_on_commit(message, list(message.image_files.order_by("position")))
    message_sent_emit(message)
    channels_release(item_id=message.ref, now=now)


# --- Notifications -------------------------------------------------------------------


def notification_schedule(
    *,
    message_type: str,
    scope: str,
    title: str,
    body_html: str,
    send_at: datetime,
    ttl_seconds: int | None = None,
    channels: ChannelRequest | None = None,
    translations: Mapping[str, Any] | None = None,
    group_key: str = "",
    actor: str = "",
) -> Notification:
    """Store a notification to be sent at ``send_at`` to the subscribers then
    (with ``channels``, by Web Push and e-mail too, from then on)."""
    group_key, actor = group_fields_clean(group_key=group_key, actor=actor)
    mtype = message_type_get(code=message_type)
    clean_scope = _scope(scope)
    if not isinstance(title, str) or not title.strip():
        raise _invalid("title", "A title is required.")
    ttl = _ttl(ttl_seconds) if ttl_seconds is not None else int(mtype.default_ttl_seconds)
    send_at_check(send_at)
    localized = translations_validate(translations) if translations is not None else {}
    with transaction.atomic():
        notification = Notification.objects.create(
            message_type=mtype,
            scope=clean_scope,
            category=mtype.category,
            title=title.strip()[:200],
            body_html=sanitize_html(body_html),
            created_at=send_at,
            send_at=send_at,
            # The TTL is kept as the distance from created_at; the send moves both.
            expire_at=send_at + timedelta(seconds=ttl),
            scheduled=True,
            slot_month=0,
            slot_offset=0,
            translations=localized,
            group_key=group_key,
            actor=actor,
        )
        if channels is not None:
            channels_plan(
                item_id=notification.ref, category=mtype.category, request=channels, created_at=send_at, sent=False
            )
    return notification


def _locked_scheduled_notification(notification: Notification) -> Notification:
    locked = Notification.objects.select_for_update().get(pk=notification.pk)
    if not locked.scheduled:
        raise Conflict("The notification is no longer scheduled (sent or cancelled).", code="not_scheduled")
    return locked


def notification_schedule_update(*, notification: Notification, data: Mapping[str, Any]) -> Notification:
    """Edit a scheduled notification: title, body_html, scope, send_at, ttl_seconds. 409 once sent."""
    with transaction.atomic():
        locked = _locked_scheduled_notification(notification)
        send_at = send_at_check(data["send_at"]) if "send_at" in data else (locked.send_at or timezone.now())
        ttl = (
            _ttl(data["ttl_seconds"])
            if data.get("ttl_seconds") is not None
            else int((locked.expire_at - locked.created_at).total_seconds())
        )
        changes: dict[str, Any] = {
            "send_at": send_at,
            "created_at": send_at,
            "expire_at": send_at + timedelta(seconds=ttl),
        }
        if "title" in data:
            if not str(data["title"]).strip():
                raise _invalid("title", "A title is required.")
            changes["title"] = str(data["title"]).strip()[:200]
        if "body_html" in data:
            changes["body_html"] = sanitize_html(data["body_html"])
        if "scope" in data:
            changes["scope"] = _scope(data["scope"])
        Notification.objects.filter(pk=locked.pk).update(**changes)
    notification.refresh_from_db()
    return notification


def notification_cancel_or_withdraw(*, notification: Notification) -> bool:
    """DELETE: a scheduled notification is cancelled (it never reaches anyone),
    a sent one withdrawn from every inbox. False when that happened already."""
    with transaction.atomic():
        locked = Notification.objects.select_for_update().get(pk=notification.pk)
        if locked.scheduled:
            Notification.objects.filter(pk=locked.pk).update(
                scheduled=False, withdrawn=True, withdrawn_at=timezone.now()
            )
            notification.refresh_from_db()
            return True
    return notification_withdraw(notification=notification)


def _notification_release(notification: Notification, now: datetime) -> None:
    audience = subscription_audience(message_type=notification.message_type, scope=notification.scope)
    if audience and audience.max() > int(settings.MESSAGECENTER_MAX_USER_ID):
        raise LimitExceeded("A user id is beyond MESSAGECENTER_MAX_USER_ID; bitmaps cannot address it.")
    month, offset = slot_allocate(at=now)
    ttl = notification.expire_at - notification.created_at
    changes: dict[str, Any] = {
        "scheduled": False,
        "created_at": now,
        "expire_at": now + ttl,
        "recipients": len(audience),
        "audience_bitmap": audience.serialize() if audience else b"",
        "slot_month": month,
        "slot_offset": offset,
    }
    Notification.objects.filter(pk=notification.pk).update(**changes)
    for field, value in changes.items():
        setattr(notification, field, value)
    delivery_add(task=DELIVER_TASK, object_id=notification.pk)
    notification_sent_emit(notification)
    channels_release(item_id=notification.ref, now=now)


# --- The due job ---------------------------------------------------------------------


def scheduled_send_due(*, now: datetime | None = None, limit: int = BATCH) -> int:
    """Send every scheduled message and notification whose send_at has passed
    (at most ``limit`` of each per run). Each in its own transaction, taken
    with SKIP LOCKED: concurrent runs share the work, none sends a row twice.
    Returns how many were sent."""
    now = now or timezone.now()
    sent = 0
    # mc_message_scheduled_idx / mc_notification_sched_idx serve these scans.
    message_ids = list(
        Message.objects.filter(status=MessageStatus.SCHEDULED, send_at__lte=now)
        .order_by("send_at", "pk")
        .values_list("pk", flat=True)[:limit]
    )
    for pk in message_ids:
        with transaction.atomic():
            message = (
                Message.objects.select_for_update(skip_locked=True)
                .filter(pk=pk, status=MessageStatus.SCHEDULED, send_at__lte=now)
                .first()
            )
            if message is not None:
                _message_release(message, timezone.now())
                sent += 1
    notification_ids = list(
        Notification.objects.filter(scheduled=True, send_at__lte=now)
        .order_by("send_at", "pk")
        .values_list("pk", flat=True)[:limit]
    )
    for pk in notification_ids:
        with transaction.atomic():
            notification = (
                Notification.objects.select_for_update(skip_locked=True, of=("self",))
                .select_related("message_type")
                .filter(pk=pk, scheduled=True, send_at__lte=now)
                .first()
            )
            if notification is not None:
                _notification_release(notification, timezone.now())
                sent += 1
    return sent
