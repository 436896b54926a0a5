"""What an operator asks of the channels when sending, and its start.

``channels_plan`` runs in the send's transaction: it stores one
``ItemChannels`` row for the item (never a row per recipient). A sent item
starts at once (``channels_start``): the push fan-out's chunks are written as
pending deliveries (``services.delivery``: committed with the item, relayed
until done) and the e-mail scan is due after the delay. A scheduled item
starts when the scheduled send releases it.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Max
from django.utils import timezone

from core.api.errors import ValidationFailed
from messagecenter.models import ItemChannels, PushSubscription
from messagecenter.services.channels.recipients import ChannelItem, channel_item
from messagecenter.services.delivery import delivery_add

EMAIL_AFTER_MIN = 60
EMAIL_AFTER_MAX = 7 * 24 * 60 * 60
PUSH_CHUNK_TASK = "messagecenter.channel_push_chunk"


@dataclass(frozen=True)
class ChannelRequest:
    web_push: bool = False
    email_after_seconds: int | None = None

    @property
    def wanted(self) -> bool:
        return self.web_push or self.email_after_seconds is not None


def _invalid(message: str, field: str) -> ValidationFailed:
    return ValidationFailed(message, fields={"channels": {field: [message]}})


def channel_request(raw: Mapping[str, Any] | None) -> ChannelRequest:
    """``{"web_push"?: bool, "email_if_unread_after_seconds"?: int}`` checked;
    anything else is a 400 on ``channels``."""
    if raw is None:
        return ChannelRequest()
    if not isinstance(raw, Mapping):
        raise ValidationFailed("channels must be an object.", fields={"channels": ["Must be an object."]})
    unknown = sorted(set(raw) - {"web_push", "email_if_unread_after_seconds"})
    if unknown:
        raise _invalid(f"Unknown field(s): {', '.join(unknown)}.", unknown[0])
    web_push = raw.get("web_push", False)
    if not isinstance(web_push, bool):
        raise _invalid("web_push must be true or false.", "web_push")
    after = raw.get("email_if_unread_after_seconds")
    if after is not None and (
        isinstance(after, bool) or not isinstance(after, int) or not EMAIL_AFTER_MIN <= after <= EMAIL_AFTER_MAX
    ):
        message = f"email_if_unread_after_seconds must be a whole number from {EMAIL_AFTER_MIN} to {EMAIL_AFTER_MAX}."
        raise _invalid(message, "email_if_unread_after_seconds")
    return ChannelRequest(web_push=web_push, email_after_seconds=after)


def channels_plan(
    *, item_id: str, category: str, request: ChannelRequest, created_at: datetime, sent: bool
) -> ItemChannels | None:
    """Store what the item asks of the channels (None: nothing). In the send's
    transaction; a sent item starts now, a scheduled one when it is released."""
    if not request.wanted:
        return None
    channels = ItemChannels.objects.create(
        item_id=item_id,
        category=category,
        web_push=request.web_push,
        email_after_seconds=request.email_after_seconds,
        created_at=created_at,
    )
    if sent:
        channels_start(channels=channels)
    return channels


def channels_start(*, channels: ItemChannels, now: datetime | None = None) -> None:
    """The item is sent: its e-mail scan is due after the delay, its pushes go
    out as chunks of pending deliveries. In the send's transaction."""
    now = now or timezone.now()
    if channels.email_after_seconds is not None:
        channels.email_due_at = now + timedelta(seconds=int(channels.email_after_seconds))
        channels.created_at = now
        channels.save(update_fields=["email_due_at", "created_at"])
    if channels.web_push:
        item = channel_item(channels.item_id)
        chunks = push_chunk_count(item) if item is not None else 0
        delivery_add(task=PUSH_CHUNK_TASK, object_id=channels.pk, indexes=range(chunks))


def push_chunk_count(item: ChannelItem) -> int:
    """Chunks of the push fan-out: slices of the audience (``MESSAGECENTER_PUSH_CHUNK``
    users each); for everyone, ranges of subscription ids (as many, up to the
    newest subscription now: who subscribes later did not subscribe to this)."""
    size = int(settings.MESSAGECENTER_PUSH_CHUNK)
    if item.everyone:
        newest = PushSubscription.objects.aggregate(newest=Max("pk"))["newest"] or 0
        return (int(newest) + size - 1) // size
    return (len(item.audience) + size - 1) // size


def channels_release(*, item_id: str, now: datetime | None = None) -> None:
    """A scheduled item is sent now: start what it asked of the channels."""
    channels = ItemChannels.objects.filter(item_id=item_id).first()
    if channels is not None:
        channels_start(channels=channels, now=now)
