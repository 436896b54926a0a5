"""Operator insight into one message or bulletin (read use cases for the admin):
how many users it reached, how many have read it, and the read rate over time.

Reads are first reads per user, counted per hour when the inbox script sees a
user's read bit go 0 -> 1 for the first time (messagecenter/readmodel/reads.py).
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth import get_user_model
from pyroaring import BitMap
from redis.exceptions import RedisError

from core.insight import TimelinePoint, timeline
from messagecenter import selectors
from messagecenter.exceptions import InboxUnavailable
from messagecenter.models import Bulletin, DeliveryMode, Message, UserGroupMembership
from messagecenter.readmodel import reads


@dataclass(frozen=True)
class ItemReadStats:
    audience: int  # users the item is for (the ratio's denominator)
    audience_note: str  # how ``audience`` was obtained
    pushed: tuple[int, int] | None  # push fan-out (users pushed so far, users to push); None for pull/bulletins
    timeline: list[TimelinePoint]

    @property
    def read(self) -> int:
        return self.timeline[-1].cumulative if self.timeline else 0

    @property
    def ratio(self) -> float | None:
        return None if self.audience <= 0 else min(self.read / self.audience, 1.0)


def _active_users() -> int:
    return get_user_model().objects.filter(is_active=True).count()


def _read_timeline(ref: str) -> list[TimelinePoint]:
    try:
        reads.first_reads_fold(resolve=selectors.item_refs_at_slots)
        return timeline(reads.read_hours(ref=ref))
    except RedisError as exc:
        raise InboxUnavailable("Read statistics are unavailable; try again shortly.") from exc


def message_read_counts(*, messages: Iterable[Message]) -> dict[int, int]:
    """How many recipients have read each message: its first reads (the same
    counters as the read timeline, so the two always agree), pending ones folded first."""
    refs = {message.ref: int(message.pk) for message in messages}
    try:
        reads.first_reads_fold(resolve=selectors.item_refs_at_slots)
        totals = reads.read_totals(refs=refs)
    except RedisError as exc:
        raise InboxUnavailable("Read counts are unavailable; try again shortly.") from exc
    return {refs[ref]: total for ref, total in totals.items()}


def message_read_stats(*, message: Message) -> ItemReadStats:
    """Audience: resolved at send time (``audience_size``); for everyone, the active
    users now (the send does not record a number for everyone)."""
    if message.everyone or message.audience_size is None:
        audience, note = _active_users(), "everyone: active users now"
    else:
        audience, note = int(message.audience_size), "resolved at send time"
    pushed = selectors.message_progress(message=message) if message.delivery == DeliveryMode.PUSH else None
    return ItemReadStats(audience=audience, audience_note=note, pushed=pushed, timeline=_read_timeline(message.ref))


def bulletin_read_stats(*, bulletin: Bulletin) -> ItemReadStats:
    """Audience: the active members of its groups now, or every active user when it has none."""
    group_ids = list(bulletin.groups.values_list("pk", flat=True))
    if group_ids:
        members = UserGroupMembership.objects.filter(group_id__in=group_ids).values("user_id")
        audience = get_user_model().objects.filter(is_active=True, pk__in=members).count()
        note = "active members of its groups now"
    else:
        audience, note = _active_users(), "everyone: active users now"
    return ItemReadStats(audience=audience, audience_note=note, pushed=None, timeline=_read_timeline(bulletin.ref))


# Readers over time on the activity dashboard (registered with core.activity in apps.py).
# A message's read state lives in each recipient's bitmaps (bit = item offset), so
# there is no per-message reader bitmap to intersect with the days' active users:
# the dashboard shows its first reads per day only.


def message_exists(message_id: int) -> bool:
    return Message.objects.filter(pk=message_id).exists()


def message_first_reads(message_id: int) -> dict[datetime, int]:
    """First reads per hour (raises RedisError)."""
    reads.first_reads_fold(resolve=selectors.item_refs_at_slots)
    return reads.read_hours(ref=f"m{int(message_id)}")


def message_readers(message_id: int) -> BitMap | None:
    return None
