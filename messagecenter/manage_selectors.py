"""Operators' read-back (``GET /api/v1/manage/...``): every list is newest first by
(created_at, id) with a keyset cursor (``core.api.pagination.keyset_page``), bound to
the list and its filters. These are PostgreSQL reads: operators see the truth,
not the read model; only a message's read count comes from Redis."""

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from django.core.exceptions import ObjectDoesNotExist
from django.db.models import Count, Model, Q, QuerySet

from core.api.errors import NotFound
from core.api.pagination import KeysetPage, keyset_page
from core.api.params import page_scope
from messagecenter import insight
from messagecenter.channel_selectors import ChannelCounts, channel_counts
from messagecenter.models import (
    Bulletin,
    Message,
    MessageResponse,
    MessageSendKey,
    MessageType,
    Notification,
    Subscription,
    UserGroup,
    UserGroupMembership,
)

M = TypeVar("M", bound=Model)

BULLETIN_STATUSES = ("scheduled", "live", "expired")


def _get(queryset: QuerySet[M], pk: int, what: str) -> M:
    try:
        return queryset.get(pk=pk)
    except ObjectDoesNotExist as exc:
        raise NotFound(f"No such {what}.") from exc


def _page(rows: QuerySet[M], *, name: str, filters: dict[str, Any], limit: int, cursor: str | None) -> KeysetPage[M]:
    since = filters.get("since")
    if since is not None:
        rows = rows.filter(created_at__gt=since)
    return keyset_page(rows, limit=limit, cursor=cursor, scope=page_scope(name, filters))


# --- messages --------------------------------------------------------------------


@dataclass(frozen=True)
class MessageReadBack:
    message: Message
    read_count: int
    # The key of an idempotent send, while its row is kept (the idempotency window).
    idempotency_key: str | None = None
    # What Web Push and e-mail did for it (None: it asked nothing of them).
    channels: ChannelCounts | None = None


def _messages() -> QuerySet[Message]:
    return Message.objects.prefetch_related("groups")


def _with_reads(messages: list[Message]) -> list[MessageReadBack]:
    counts = insight.message_read_counts(messages=messages)
    # One query per page; the index Django puts on the message foreign key serves it.
    keys = dict(MessageSendKey.objects.filter(message__in=[m.pk for m in messages]).values_list("message_id", "key"))
    channels = channel_counts(item_ids=[m.ref for m in messages])
    return [
        MessageReadBack(
            message=m,
            read_count=counts.get(int(m.pk), 0),
            idempotency_key=keys.get(m.pk),
            channels=channels.get(m.ref),
        )
        for m in messages
    ]


def message_manage_list(
    *,
    limit: int,
    cursor: str | None,
    category: str | None = None,
    status: str | None = None,
    delivery: str | None = None,
    group: int | None = None,
    since: datetime | None = None,
) -> KeysetPage[MessageReadBack]:
    filters = {"category": category, "status": status, "delivery": delivery, "group": group, "since": since}
    rows = _messages()
    if category is not None:
        rows = rows.filter(category=category)
    if status is not None:
        rows = rows.filter(status=status)
    if delivery is not None:
        rows = rows.filter(delivery=delivery)
    if group is not None:
        rows = rows.filter(groups=group)
    page = _page(rows, name="manage-messages", filters=filters, limit=limit, cursor=cursor)
    return KeysetPage(items=_with_reads(page.items), next_cursor=page.next_cursor)


def message_manage_get(*, message_id: int) -> MessageReadBack:
    return _with_reads([_get(_messages(), message_id, "message")])[0]


# --- bulletins -------------------------------------------------------------------


def _bulletins() -> QuerySet[Bulletin]:
    return Bulletin.objects.prefetch_related("groups")


def bulletin_manage_list(
    *,
    limit: int,
    cursor: str | None,
    group: int | None = None,
    status: str | None = None,
    since: datetime | None = None,
    now: datetime,
) -> KeysetPage[Bulletin]:
    filters = {"group": group, "status": status, "since": since}
    rows = _bulletins()
    if group is not None:
        rows = rows.filter(groups=group)
    if status == "scheduled":
        rows = rows.filter(display_time__gt=now)
    elif status == "live":
        rows = rows.filter(Q(display_time__lte=now) & (Q(expire_at__isnull=True) | Q(expire_at__gt=now)))
    elif status == "expired":
        rows = rows.filter(expire_at__lte=now)
    return _page(rows, name="manage-bulletins", filters=filters, limit=limit, cursor=cursor)


def bulletin_manage_get(*, bulletin_id: int) -> Bulletin:
    return _get(_bulletins(), bulletin_id, "bulletin")


# --- user groups -----------------------------------------------------------------


def _groups() -> QuerySet[UserGroup]:
    return UserGroup.objects.annotate(member_count=Count("memberships"))


def user_group_manage_list(
    *, limit: int, cursor: str | None, name: str | None = None, since: datetime | None = None
) -> KeysetPage[UserGroup]:
    filters = {"name": name, "since": since}
    rows = _groups()
    if name is not None:
        rows = rows.filter(name__icontains=name)
    return _page(rows, name="manage-user-groups", filters=filters, limit=limit, cursor=cursor)


def user_group_manage_get(*, group_id: int) -> UserGroup:
    return _get(_groups(), group_id, "user group")


def user_group_members_list(*, group: UserGroup, limit: int, cursor: str | None) -> KeysetPage[UserGroupMembership]:
    """Members newest first (by when they joined); mc_membership_unique's (group, user) prefix finds them."""
    rows = UserGroupMembership.objects.filter(group=group).select_related("user")
    return keyset_page(rows, limit=limit, cursor=cursor, scope=page_scope("manage-members", {"group": group.pk}))


# --- message types, subscriptions, notifications -----------------------------------


def message_type_manage_list(
    *, limit: int, cursor: str | None, category: str | None = None, since: datetime | None = None
) -> KeysetPage[MessageType]:
    filters = {"category": category, "since": since}
    rows = MessageType.objects.all()
    if category is not None:
        rows = rows.filter(category=category)
    return _page(rows, name="manage-message-types", filters=filters, limit=limit, cursor=cursor)


def message_type_manage_get(*, message_type_id: int) -> MessageType:
    return _get(MessageType.objects.all(), message_type_id, "message type")


def _subscriptions() -> QuerySet[Subscription]:
    return Subscription.objects.select_related("message_type")


def subscription_manage_list(
    *,
    limit: int,
    cursor: str | None,
    message_type: str | None = None,
    scope: str | None = None,
    user: int | None = None,
    group: int | None = None,
    since: datetime | None = None,
) -> KeysetPage[Subscription]:
    filters = {"message_type": message_type, "scope": scope, "user": user, "group": group, "since": since}
    rows = _subscriptions()
    if message_type is not None:
        rows = rows.filter(message_type__code=message_type)
    if scope is not None:
        rows = rows.filter(scope=scope)
    if user is not None:
        rows = rows.filter(user_id=user)
    if group is not None:
        rows = rows.filter(group_id=group)
    return _page(rows, name="manage-subscriptions", filters=filters, limit=limit, cursor=cursor)


def subscription_manage_get(*, subscription_id: int) -> Subscription:
    return _get(_subscriptions(), subscription_id, "subscription")


def _notifications() -> QuerySet[Notification]:
    return Notification.objects.select_related("message_type")


def notification_manage_list(
    *,
    limit: int,
    cursor: str | None,
    message_type: str | None = None,
    scope: str | None = None,
    category: str | None = None,
    since: datetime | None = None,
) -> KeysetPage[Notification]:
    filters = {"message_type": message_type, "scope": scope, "category": category, "since": since}
    rows = _notifications()
    if message_type is not None:
        rows = rows.filter(message_type__code=message_type)
    if scope is not None:
        rows = rows.filter(scope=scope)
    if category is not None:
        rows = rows.filter(category=category)
    return _page(rows, name="manage-notifications", filters=filters, limit=limit, cursor=cursor)


def notification_manage_get(*, notification_id: int) -> Notification:
    return _get(_notifications(), notification_id, "notification")


# --- answers to a message's actions ------------------------------------------------


def message_response_counts(*, message: Message) -> dict[str, int]:
    """How many recipients answered each action (every offered action, zero included)."""
    counts = dict.fromkeys((str(a["id"]) for a in message.actions or []), 0)
    rows = MessageResponse.objects.filter(message=message).values_list("action").annotate(n=Count("id"))
    counts.update({action: int(n) for action, n in rows})
    return counts


def message_plain_get(*, message_id: int) -> Message:
    """The message row alone (no read count); NotFound when absent."""
    return _get(Message.objects.all(), message_id, "message")


def message_responses_list(*, message: Message, limit: int, cursor: str | None) -> KeysetPage[MessageResponse]:
    """Answers newest first; mc_response_message_at_idx serves the walk."""
    rows = MessageResponse.objects.filter(message=message).select_related("user")
    return keyset_page(
        rows, limit=limit, cursor=cursor, scope=page_scope("manage-responses", {"message": message.pk}), time_field="at"
    )


def message_responses_export(*, message_ids: list[int]) -> Iterator[MessageResponse]:
    """Every answer to these messages, by message then newest first (the admin's CSV)."""
    rows = MessageResponse.objects.filter(message_id__in=message_ids).select_related("user", "message")
    return rows.order_by("message_id", "-at", "-id").iterator(chunk_size=1000)
