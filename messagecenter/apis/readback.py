"""Operators' read-back: the output serializers, schema pieces and examples of
``GET /api/v1/manage/...`` for the message centre's resources.

The GET methods live on the API classes of their paths (in ``manage`` and
``subscriptions``: one Django view per path); what they share is here. Each
object answers at least the fields its create call accepts, plus ``id`` and
``created_at``.
"""

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema_field
from rest_framework import serializers

from core.api.fields import (
    OffsetDateTimeField,
    StrictBooleanField,
    StrictCharField,
    StrictInputSerializer,
    StrictIntegerField,
    TranslationsField,
)
from core.api.openapi import example, filter_parameter, id_filter_parameter, list_parameters
from messagecenter.channel_selectors import ChannelCounts, channel_counts
from messagecenter.manage_selectors import BULLETIN_STATUSES, MessageReadBack
from messagecenter.models import (
    CATEGORIES,
    Bulletin,
    DeliveryMode,
    Message,
    MessageStatus,
    NotificationStatus,
    UserGroupMembership,
)
from messagecenter.services.channels.plan import EMAIL_AFTER_MAX, EMAIL_AFTER_MIN
from messagecenter.services.responses import actions_validate

_CATEGORY = filter_parameter("category", "Only this category.", enum=list(CATEGORIES))


def _ids(values: Any) -> list[str]:
    return [str(value) for value in values]


# --- user groups -----------------------------------------------------------------


class UserGroupOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    member_count = serializers.IntegerField()
    created_at = OffsetDateTimeField()


class MemberSerializer(serializers.Serializer):
    id = serializers.CharField(source="user_id")
    username = serializers.CharField(source="user.username")
    joined_at = OffsetDateTimeField(source="created_at")


USER_GROUP_EXAMPLE = {
    "id": "3",
    "name": "warehouse-leads",
    "member_count": 12,
    "created_at": "2026-11-20T08:00:00+00:00",
}
MEMBER_EXAMPLE = {"id": "42", "username": "alice", "joined_at": "2026-11-21T09:30:00+00:00"}
USER_GROUP_FILTERS = list_parameters(filter_parameter("name", "Only groups whose name contains this text."))


def members_data(rows: list[UserGroupMembership]) -> list[dict[str, Any]]:
    return list(MemberSerializer(rows, many=True).data)


# --- bulletins -------------------------------------------------------------------


class BulletinReadSerializer(serializers.Serializer):
    id = serializers.CharField()
    title = serializers.CharField()
    body_html = serializers.CharField(allow_blank=True)
    display_time = OffsetDateTimeField()
    expire_at = OffsetDateTimeField(allow_null=True)
    user_groups = serializers.ListField(child=serializers.CharField(), help_text="Empty: everyone.")
    created_at = OffsetDateTimeField()
    updated_at = OffsetDateTimeField()
    translations = TranslationsField()


def bulletin_data(bulletin: Bulletin) -> dict[str, Any]:
    return dict(
        BulletinReadSerializer(
            {
                "id": bulletin.pk,
                "title": bulletin.title,
                "body_html": bulletin.body_html,
                "display_time": bulletin.display_time,
                "expire_at": bulletin.expire_at,
                "user_groups": _ids(group.pk for group in bulletin.groups.all()),
                "created_at": bulletin.created_at,
                "updated_at": bulletin.updated_at,
                "translations": dict(bulletin.translations or {}),
            }
        ).data
    )


BULLETIN_EXAMPLE = {
    "id": "7",
    "title": "Stock-take on Friday",
    "body_html": "<p>All warehouses count stock on Friday.</p>",
    "display_time": "2026-11-22T06:00:00+00:00",
    "expire_at": "2026-11-29T06:00:00+00:00",
    "user_groups": ["3"],
    "created_at": "2026-11-21T17:00:00+00:00",
    "updated_at": "2026-11-21T17:00:00+00:00",
}
BULLETIN_FILTERS = list_parameters(
    id_filter_parameter("group", "Only bulletins shown to this user group."),
    filter_parameter("status", "Only bulletins in this state now.", enum=list(BULLETIN_STATUSES)),
)


# --- messages --------------------------------------------------------------------


class MessageAudienceOutputSerializer(serializers.Serializer):
    users = serializers.ListField(child=serializers.CharField(), help_text="Users named explicitly.")
    groups = serializers.ListField(child=serializers.CharField())
    everyone = serializers.BooleanField()


class ChannelPushCountsSerializer(serializers.Serializer):
    sent = serializers.IntegerField(help_text="Pushes the push services accepted (one per device).")
    failed = serializers.IntegerField(help_text="Pushes that failed for good (404/410, or retries spent).")


class ChannelEmailCountsSerializer(serializers.Serializer):
    sent = serializers.IntegerField(help_text="E-mails sent about it (one per recipient at most).")
    skipped_read = serializers.IntegerField(
        help_text="Recipients who had read, archived or deleted it when the delay was over."
    )
    deferred = serializers.IntegerField(
        help_text="Recipients it went to the digest for instead (their choice, or the hourly cap)."
    )


class ChannelCountsSerializer(serializers.Serializer):
    web_push = ChannelPushCountsSerializer()
    email = ChannelEmailCountsSerializer()


class ItemChannelsSerializer(StrictInputSerializer):
    """What a message or notification asks of the channels beyond the inbox."""

    web_push = StrictBooleanField(
        required=False,
        help_text="Push it to every recipient's devices (who allows pushes for its category and has not muted it).",
    )
    email_if_unread_after_seconds = StrictIntegerField(
        required=False,
        min_value=EMAIL_AFTER_MIN,
        max_value=EMAIL_AFTER_MAX,
        help_text="E-mail every recipient who has not read, archived or deleted it this many seconds after it "
        "was sent (and chose e-mails for its category); once per recipient.",
    )


class ChannelsRequestedSerializer(serializers.Serializer):
    web_push = serializers.BooleanField(help_text="Whether the create asked for pushes.")
    email_if_unread_after_seconds = serializers.IntegerField(
        allow_null=True, help_text="The create's delay before e-mails; null: no e-mails."
    )


def channels_data(counts: ChannelCounts | None) -> dict[str, Any]:
    return (counts or ChannelCounts()).as_dict()


def channels_requested(counts: ChannelCounts | None) -> dict[str, Any]:
    return (counts or ChannelCounts()).requested()


class ActionInputSerializer(StrictInputSerializer):
    id = StrictCharField(max_length=32, help_text="A slug (letters, digits, - and _), at most 32 characters.")
    label = StrictCharField(max_length=40, help_text="The button's text, at most 40 characters.")  # type: ignore[assignment]

    def validate_id(self, value: str) -> str:
        return str(actions_validate([{"id": value, "label": "x"}])[0]["id"])

    def to_representation(self, instance: Any) -> Any:
        return {"id": instance["id"], "label": instance["label"]}


class MessageReadSerializer(serializers.Serializer):
    id = serializers.CharField()
    category = serializers.CharField()
    title = serializers.CharField()
    summary = serializers.CharField(allow_blank=True)
    body_html = serializers.CharField(allow_blank=True)
    link = serializers.CharField(allow_blank=True, allow_null=True)
    images = serializers.ListField(child=serializers.CharField())
    to = MessageAudienceOutputSerializer()
    expire_at = OffsetDateTimeField(allow_null=True)
    send_at = OffsetDateTimeField(
        allow_null=True, help_text="When it is (or was) to be sent, if it was scheduled; null: sent at once."
    )
    idempotency_key = serializers.CharField(
        allow_null=True,
        help_text="The idempotency key it was sent with; null when sent without one, or once the key's "
        "24-hour window is over and the clean-up removed it.",
    )
    created_at = OffsetDateTimeField()
    sender = serializers.CharField(allow_null=True, help_text="Username of the operator who sent it.")
    delivery = serializers.ChoiceField(choices=DeliveryMode.values)
    recipients = serializers.IntegerField(allow_null=True, help_text="Users resolved at send time; null for everyone.")
    status = serializers.ChoiceField(choices=MessageStatus.choices)
    read_count = serializers.IntegerField(help_text="Recipients who have read it (each counted once).")
    channels = ChannelCountsSerializer(help_text="What Web Push and e-mail did for it (zeros when not asked).")
    channels_requested = ChannelsRequestedSerializer(help_text="What the create's channels asked.")
    actions = ActionInputSerializer(many=True, help_text="The actions recipients may answer (empty: none).")
    translations = TranslationsField()
    group_key = serializers.CharField(
        allow_null=True, help_text="The key its recipients' inboxes group it by; null: never grouped."
    )
    actor = serializers.CharField(allow_null=True, help_text="The display name a grouped row lists; null: none.")


def message_data(item: MessageReadBack) -> dict[str, Any]:
    message: Message = item.message
    return dict(
        MessageReadSerializer(
            {
                "id": message.pk,
                "category": message.category,
                "title": message.title,
                "summary": message.summary,
                "body_html": message.body_html,
                "link": message.link or None,
                "images": list(message.images or []),
                "to": {
                    "users": _ids(message.explicit_users),
                    "groups": _ids(group.pk for group in message.groups.all()),
                    "everyone": message.everyone,
                },
                "expire_at": message.expire_at,
                "send_at": message.send_at,
                "idempotency_key": item.idempotency_key,
                "created_at": message.created_at,
                "sender": message.sender.get_username() if message.sender is not None else None,
                "delivery": message.delivery,
                "recipients": message.audience_size,
                "status": message.status,
                "read_count": item.read_count,
                "channels": channels_data(item.channels),
                "channels_requested": channels_requested(item.channels),
                "actions": list(message.actions or []),
                "translations": dict(message.translations or {}),
                "group_key": message.group_key or None,
                "actor": message.actor or None,
            }
        ).data
    )


MESSAGE_EXAMPLE: dict[str, Any] = {
    "id": "311",
    "category": "system",
    "title": "Maintenance tonight",
    "summary": "The service pauses from 22:00 to 23:00 UTC.",
    "body_html": "<p>The service pauses from 22:00 to 23:00 UTC.</p>",
    "link": None,
    "images": [],
    "to": {"users": ["42"], "groups": ["3"], "everyone": False},
    "expire_at": None,
    "send_at": None,
    "idempotency_key": "maintenance-2026-11-22",
    "created_at": "2026-11-22T10:00:00+00:00",
    "sender": "olivia-operator",
    "delivery": "push",
    "recipients": 13,
    "status": "delivered",
    "read_count": 5,
    "channels": {
        "web_push": {"sent": 9, "failed": 1},
        "email": {"sent": 3, "skipped_read": 5, "deferred": 1},
    },
    "channels_requested": {"web_push": True, "email_if_unread_after_seconds": 3600},
}
MESSAGE_FILTERS = list_parameters(
    _CATEGORY,
    filter_parameter("status", "Only messages in this state.", enum=list(MessageStatus.values)),
    filter_parameter("delivery", "push or pull.", enum=list(DeliveryMode.values)),
    id_filter_parameter("group", "Only messages addressed to this user group."),
)


# --- message types, subscriptions, notifications -----------------------------------


class MessageTypeOutputSerializer(serializers.Serializer):
    """A message type as operators read it back; add a field here and both the
    create answer and the read-back carry it."""

    id = serializers.CharField()
    code = serializers.CharField()
    name = serializers.CharField()
    category = serializers.CharField()
    default_ttl_seconds = serializers.IntegerField()
    self_service = serializers.BooleanField()
    created_at = OffsetDateTimeField()


MESSAGE_TYPE_EXAMPLE = {
    "id": "2",
    "code": "low-stock",
    "name": "Low stock",
    "category": "system",
    "default_ttl_seconds": 604800,
    "self_service": False,
    "created_at": "2026-11-20T08:00:00+00:00",
}
MESSAGE_TYPE_FILTERS = list_parameters(_CATEGORY)


class SubscriptionOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    message_type = serializers.CharField(source="message_type.code")
    scope = serializers.CharField()
    user = serializers.CharField(source="user_id", allow_null=True)
    group = serializers.CharField(source="group_id", allow_null=True)
    created_at = OffsetDateTimeField()


SUBSCRIPTION_EXAMPLE = {
    "id": "9",
    "message_type": "low-stock",
    "scope": "warehouse-7",
    "user": None,
    "group": "3",
    "created_at": "2026-11-20T08:05:00+00:00",
}
_TYPE_FILTER = filter_parameter("message_type", "Only this message type (its code).")
_SCOPE_FILTER = filter_parameter("scope", "Only this scope (exact).")
SUBSCRIPTION_FILTERS: list[OpenApiParameter] = list_parameters(
    _TYPE_FILTER,
    _SCOPE_FILTER,
    id_filter_parameter("user", "Only this user's own subscriptions."),
    id_filter_parameter("group", "Only this group's subscriptions."),
)


class NotificationOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    message_type = serializers.CharField(source="message_type.code")
    scope = serializers.CharField()
    category = serializers.CharField()
    title = serializers.CharField()
    body_html = serializers.CharField(allow_blank=True)
    ttl_seconds = serializers.SerializerMethodField()
    recipients = serializers.IntegerField()
    created_at = OffsetDateTimeField()
    expire_at = OffsetDateTimeField()
    withdrawn = serializers.BooleanField()
    send_at = OffsetDateTimeField(
        allow_null=True, help_text="When it is (or was) to be sent, if it was scheduled; null: sent at once."
    )
    status = serializers.ChoiceField(
        choices=NotificationStatus.choices,
        help_text="scheduled (recipients 0 until sent), sent, cancelled (before it was sent) or withdrawn.",
    )

    channels = serializers.SerializerMethodField(help_text="What Web Push and e-mail did for it.")
    channels_requested = serializers.SerializerMethodField(help_text="What the create's channels asked.")
    translations = TranslationsField()
    group_key = serializers.CharField(
        allow_null=True,
        default=None,
        help_text="The key its recipients' inboxes group it by; null: never grouped.",
    )
    actor = serializers.CharField(allow_null=True, default=None, help_text="The display name a grouped row lists.")

    def to_representation(self, instance: Any) -> dict[str, Any]:
        data: dict[str, Any] = super().to_representation(instance)
        # Stored blank when not given: the API says null.
        data["group_key"] = data.get("group_key") or None
        data["actor"] = data.get("actor") or None
        return data

    def get_ttl_seconds(self, notification: Any) -> int:
        return int((notification.expire_at - notification.created_at).total_seconds())

    def _counts(self, notification: Any) -> ChannelCounts | None:
        # A page's counts come in the context (one query); a lone read-back asks once.
        known = self.context.get("channels")
        if known is not None:
            return known.get(notification.ref)
        fetched: dict[str, ChannelCounts | None] = self.__dict__.setdefault("_fetched_channels", {})
        if notification.ref not in fetched:
            fetched[notification.ref] = channel_counts(item_ids=[notification.ref]).get(notification.ref)
        return fetched[notification.ref]

    @extend_schema_field(ChannelCountsSerializer)
    def get_channels(self, notification: Any) -> dict[str, Any]:
        return channels_data(self._counts(notification))

    @extend_schema_field(ChannelsRequestedSerializer)
    def get_channels_requested(self, notification: Any) -> dict[str, Any]:
        return channels_requested(self._counts(notification))


NOTIFICATION_EXAMPLE = {
    "id": "55",
    "message_type": "low-stock",
    "scope": "warehouse-7",
    "category": "system",
    "title": "SKU 1001 is below its minimum",
    "body_html": "<p>Replenish location A-3.</p>",
    "ttl_seconds": 604800,
    "recipients": 12,
    "created_at": "2026-11-22T10:00:00+00:00",
    "expire_at": "2026-11-29T10:00:00+00:00",
    "withdrawn": False,
    "send_at": None,
    "status": "sent",
    "channels": {
        "web_push": {"sent": 0, "failed": 0},
        "email": {"sent": 0, "skipped_read": 0, "deferred": 0},
    },
    "channels_requested": {"web_push": False, "email_if_unread_after_seconds": None},
}
NOTIFICATION_FILTERS = list_parameters(_TYPE_FILTER, _SCOPE_FILTER, _CATEGORY)


def page_example(item: dict[str, Any]) -> Any:
    return example("A page", {"results": [item], "next_cursor": None})


def one_example(item: dict[str, Any]) -> Any:
    return example("One object", item)
