"""What every channel asks before it sends: the item as it stands now, its
audience a batch at a time, and which recipients of a batch still want it.

A recipient is passed over when they read the item (their ever-read bit:
the same bit the read counts and the unread-recipients list use), archived
or deleted it, had its category or type muted when it arrived
(``selectors.muted_among``, the one mute rule), are inactive, or turned the
channel off for its category. Each batch costs one pipelined Redis round
trip per few hundred users for the read bits and one query for the users,
their preferences and their archived or deleted copies of the item (the
unread ones only), plus the mute query: never a query per user.
"""

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, time
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Exists, OuterRef
from pyroaring import BitMap

from core.api.lookups import Whole
from core.api.translations import localized
from messagecenter.models import (
    InboxHidden,
    InboxItemState,
    Message,
    MessageStatus,
    Notification,
)
from messagecenter.quiet import QuietHours, quiet_hours_of
from messagecenter.readmodel import reads, to_ms
from messagecenter.selectors import muted_among

# Users whose read bits go in one pipeline (one script call each): every Redis
# call stays around a millisecond, however large the audience.
READ_BITS_BATCH = 50
_LIVE_MESSAGE = (MessageStatus.QUEUED, MessageStatus.DELIVERING, MessageStatus.DELIVERED)


@dataclass(frozen=True)
class ChannelItem:
    """A message or notification as the channels see it."""

    ref: str
    category: str
    title: str
    summary: str
    created_at: datetime
    expire_at: datetime | None
    live: bool  # sent, not retracted, withdrawn or expired
    everyone: bool
    audience: BitMap
    message_type_id: int | None
    month: int
    offset: int
    # {language code: {"title", "summary"?, ...}}: what a reader of that language is shown.
    translations: dict[str, Any] = field(default_factory=dict)

    def in_language(self, language: str | None) -> "ChannelItem":
        """The item as a reader of ``language`` sees it (each field falling back to the original)."""
        if not self.translations or not language:
            return self
        shown = localized({"title": self.title, "summary": self.summary}, self.translations, language)
        return dataclasses.replace(self, title=shown["title"], summary=shown["summary"])

    def alive(self, now: datetime) -> bool:
        return self.live and (self.expire_at is None or self.expire_at > now)

    def addressed_to(self, user_id: int) -> bool:
        return self.everyone or user_id in self.audience

    @property
    def audience_size(self) -> int | None:
        return None if self.everyone else len(self.audience)


def channel_item(ref: str) -> ChannelItem | None:
    """The item named by an inbox ref (``m<id>``, ``n<id>``); None when gone."""
    kind, raw = ref[:1], ref[1:]
    if not raw.isdigit():
        return None
    if kind == "m":
        message = Message.objects.filter(pk=int(raw)).first()
        if message is None:
            return None
        return ChannelItem(
            ref=ref,
            category=message.category,
            title=message.title,
            summary=message.summary,
            created_at=message.created_at,
            expire_at=message.expire_at,
            live=message.status in _LIVE_MESSAGE,
            everyone=message.everyone,
            audience=message.audience,
            message_type_id=None,
            month=int(message.slot_month),
            offset=int(message.slot_offset),
            translations=dict(message.translations or {}),
        )
    if kind == "n":
        notification = Notification.objects.filter(pk=int(raw)).first()
        if notification is None:
            return None
        return ChannelItem(
            ref=ref,
            category=notification.category,
            title=notification.title,
            summary="",
            created_at=notification.created_at,
            expire_at=notification.expire_at,
            live=not notification.withdrawn and not notification.scheduled,
            everyone=False,
            audience=notification.audience,
            message_type_id=int(notification.message_type_id),
            month=int(notification.slot_month),
            offset=int(notification.slot_offset),
            translations=dict(notification.translations or {}),
        )
    return None


def audience_after(item: ChannelItem, *, after: int, size: int) -> list[int]:
    """Up to ``size`` ids of the item's audience above ``after``, in id order:
    its send-time bitmap, or for everyone the active users now (one keyset query)."""
    if not item.everyone:
        return list(itertools.islice(item.audience.iter_equal_or_larger(after + 1), size))
    users = get_user_model().objects.filter(is_active=True, pk__gt=after).order_by("pk")
    return [int(pk) for pk in users.values_list("pk", flat=True)[:size]]


def unread_among(item: ChannelItem, user_ids: Sequence[int]) -> list[int]:
    """The users who never read the item (raises RedisError)."""
    unread: list[int] = []
    for start in range(0, len(user_ids), READ_BITS_BATCH):
        batch = user_ids[start : start + READ_BITS_BATCH]
        bits = reads.read_ever_bits(month=item.month, offset=item.offset, user_ids=batch)
        unread.extend(user_id for user_id, read in zip(batch, bits, strict=True) if not read)
    return unread


@dataclass(frozen=True)
class Recipient:
    user_id: int
    email: str
    channels: Any  # UserPreferences.channels (messagecenter.channel_prefs reads it)
    quiet: QuietHours | None
    language: str
    away: bool  # archived or deleted the item


@dataclass
class Screened:
    """A batch of the audience sorted out: who may get the item now."""

    looked_at: int = 0
    read: int = 0  # read, archived or deleted it
    recipients: list[Recipient] = field(default_factory=list)  # unread, active, not muted, not away


def recipients_of(item: ChannelItem, user_ids: Sequence[int]) -> dict[int, Recipient]:
    """Active users among ``user_ids`` with their address and preferences, and
    whether they archived or deleted the item: one query (the state and hidden
    rows by their (user, item) unique indexes)."""
    if not user_ids:
        return {}
    away = Exists(InboxItemState.objects.filter(user_id=OuterRef("pk"), item_id=item.ref, archived=True)) | Exists(
        InboxHidden.objects.filter(user_id=OuterRef("pk"), item_id=item.ref)
    )
    rows = (
        get_user_model()
        .objects.filter(pk__any_of=Whole(user_ids), is_active=True)
        .annotate(item_away=away)
        .values_list(
            "pk",
            "email",
            "mc_preferences__channels",
            "mc_preferences__quiet_start",
            "mc_preferences__quiet_end",
            "mc_preferences__quiet_timezone",
            "mc_preferences__language",
            "item_away",
        )
    )
    found: dict[int, Recipient] = {}
    for pk, email, channels, start, end, zone, language, item_away in rows:
        found[int(pk)] = Recipient(
            user_id=int(pk),
            email=str(email or ""),
            channels=channels or {},
            quiet=_quiet(start, end, zone),
            language=str(language or ""),
            away=bool(item_away),
        )
    return found


def _quiet(start: time | None, end: time | None, zone: str | None) -> QuietHours | None:
    return quiet_hours_of(start, end, zone or "")


def screen(item: ChannelItem, user_ids: Sequence[int]) -> Screened:
    """Sort a batch of the audience out (raises RedisError when the read bits are away)."""
    result = Screened(looked_at=len(user_ids))
    unread = unread_among(item, user_ids)
    result.read = len(user_ids) - len(unread)
    if not unread:
        return result
    found = recipients_of(item, unread)
    present = [u for u in unread if u in found]
    muted = muted_among(
        user_ids=present, category=item.category, time_ms=to_ms(item.created_at), message_type_id=item.message_type_id
    )
    for user_id in present:
        recipient = found[user_id]
        if recipient.away:
            result.read += 1
        elif user_id not in muted:
            result.recipients.append(recipient)
    return result
