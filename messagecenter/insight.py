"""Operator insight into one message or bulletin (read use cases for the admin
and the manage API): how many users it reached, how many have read it, the
read rate over time, who has not read it yet and its readers per day.

Reads are first reads per user, counted per hour when the inbox script sees a
user's read bit go 0 -> 1 for the first time (messagecenter/readmodel/reads.py).
"""

import csv
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from pyroaring import BitMap
from redis.exceptions import RedisError

from core.api.errors import Conflict
from insight import activity
from insight.reports import TimelinePoint, timeline, unread_scan, user_batches
from messagecenter import read_events, selectors
from messagecenter.exceptions import InboxUnavailable
from messagecenter.models import Bulletin, DeliveryMode, Message, MessageStatus, UserGroupMembership
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
        read_events.first_reads_fold()
        return timeline(reads.read_hours(ref=ref))
    except RedisError as exc:
        raise InboxUnavailable("Read statistics are unavailable; try again shortly.") from exc


def message_read_counts(*, messages: Iterable[Message]) -> dict[int, int]:
    """How many recipients have read each message: its first reads (the same
    counters as the read timeline, so the two always agree), pending ones folded first."""
    refs = {message.ref: int(message.pk) for message in messages}
    try:
        read_events.first_reads_fold()
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


def _bulletin_users(bulletin: Bulletin) -> QuerySet[Any]:
    """Its audience now: the active members of its groups, or every active user when it has none."""
    users = get_user_model().objects.filter(is_active=True)
    group_ids = list(bulletin.groups.values_list("pk", flat=True))
    if group_ids:
        users = users.filter(pk__in=UserGroupMembership.objects.filter(group_id__in=group_ids).values("user_id"))
    return users


def bulletin_read_stats(*, bulletin: Bulletin) -> ItemReadStats:
    """Audience: the active members of its groups now, or every active user when it has none."""
    audience = _bulletin_users(bulletin).count()
    if bulletin.groups.exists():
        note = "active members of its groups now"
    else:
        note = "everyone: active users now"
    return ItemReadStats(audience=audience, audience_note=note, pushed=None, timeline=_read_timeline(bulletin.ref))


# --- who has not read it yet -------------------------------------------------------
#
# "Has read" is the user's ever-read bit of the item's slot: the bit whose
# 0 -> 1 transition the first-read counters count, so this list, the read
# count and the read rate agree (a user who reads and marks unread again has
# read it). The audience is walked in user-id order a batch at a time, each
# batch's bits taken with one pipelined GETBIT: no query per user, no row per
# user and item.

Item = Message | Bulletin
UNREAD_PAGE = 50
_UNREAD_BATCH = 500
# Users checked per page at most: a page of non-readers may take several
# batches when most have read it; the cursor then resumes where it stopped.
_UNREAD_SCAN_LIMIT = 20_000


@dataclass(frozen=True)
class UnreadPage:
    users: list[tuple[int, str]]  # (id, username), in id order
    next_after: int | None  # the last id looked at when there is more; None at the end


_NEVER_SENT = (MessageStatus.SCHEDULED, MessageStatus.CANCELLED)


def _sent_slot(item: Item) -> tuple[int, int]:
    if isinstance(item, Message) and item.status in _NEVER_SENT:
        raise Conflict("The message has not been sent: nobody could read it yet.", code="not_sent")
    return int(item.slot_month), int(item.slot_offset)


def _audience_batches(item: Item, after_id: int) -> Iterator[list[tuple[int, str]]]:
    """(id, username) of the item's audience above ``after_id``, in id order, a batch at a time.

    A message to named users and groups: its send-time audience (the bitmap the
    read count's audience size came from), users deleted since left out. A
    message to everyone: the active users now; a bulletin: its audience now.
    """
    if isinstance(item, Message) and not item.everyone:
        ids = item.audience.iter_equal_or_larger(after_id + 1)
        while ids_batch := list(itertools.islice(ids, _UNREAD_BATCH)):
            named = dict(get_user_model().objects.filter(pk__in=ids_batch).values_list("pk", "username"))
            yield [(pk, named[pk]) for pk in ids_batch if pk in named]
        return
    users = _bulletin_users(item) if isinstance(item, Bulletin) else get_user_model().objects.filter(is_active=True)
    yield from user_batches(users, after_id=after_id, size=_UNREAD_BATCH)


def _with_bits(item: Item, after_id: int) -> Iterator[tuple[list[tuple[int, str]], list[bool]]]:
    month, offset = _sent_slot(item)
    for batch in _audience_batches(item, after_id):
        try:
            bits = reads.read_ever_bits(month=month, offset=offset, user_ids=[pk for pk, _ in batch])
        except RedisError as exc:
            raise InboxUnavailable("Read state is unavailable; try again shortly.") from exc
        yield batch, bits


def item_unread_page(*, item: Item, after_id: int = 0, limit: int = UNREAD_PAGE) -> UnreadPage:
    """Users of the item's audience with an id above ``after_id`` who have not read it."""
    found, cursor, stopped = unread_scan(
        _with_bits(item, int(after_id)), after_id=int(after_id), limit=limit, scan_limit=_UNREAD_SCAN_LIMIT
    )
    more = stopped and next(_audience_batches(item, cursor), None) is not None
    return UnreadPage(users=found, next_after=cursor if more else None)


def item_unread_all(*, item: Item) -> Iterator[tuple[int, str]]:
    """Every user of the item's audience who has not read it, in id order (CSV, reminders)."""
    for batch, bits in _with_bits(item, 0):
        yield from (user for user, read in zip(batch, bits, strict=True) if not read)


def item_readers(*, item: Item) -> BitMap:
    """The ids of the item's audience who have read it (the ever-read bits)."""
    readers = BitMap()
    for batch, bits in _with_bits(item, 0):
        readers.update(pk for (pk, _), read in zip(batch, bits, strict=True) if read)
    return readers


CSV_HEADER = ("id", "username")


class _Echo:
    """A file-like sink for csv.writer whose write returns the line (streamed rows)."""

    def write(self, value: str) -> str:
        return value


def unread_csv_rows(users: Iterable[tuple[int, str]]) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(CSV_HEADER)
    for pk, username in users:
        yield writer.writerow((pk, username))


# --- readers per day -----------------------------------------------------------------

READERS_DAYS_MAX = 90


def item_readers_per_day(*, item: Item, end: date, days: int | None = None) -> list[activity.ItemDay]:
    """Its first reads per day, the running total and how many of its readers
    were active each day (the activity bitmaps), from its first day (at most
    ``READERS_DAYS_MAX`` days) to ``end``."""
    if days is None:
        start = item.created_at.date()
        days = max(1, min((end - start).days + 1, READERS_DAYS_MAX))
    source = activity.reader_source("message" if isinstance(item, Message) else "bulletin")
    if source is None:  # registered in AppConfig.ready(): always there once Django is set up
        return []
    try:
        return activity.item_readers_by_day(source=source, item_id=int(item.pk), end=end, days=days)
    except RedisError as exc:
        raise InboxUnavailable("Read statistics are unavailable; try again shortly.") from exc


# Readers over time on the activity dashboard (registered with insight.activity in apps.py).
# A message's read state lives in each recipient's bitmaps (bit = item offset):
# its readers are gathered from them (``item_readers``) and intersected with
# the days' active users like an announcement's reader bitmap.


def message_exists(message_id: int) -> bool:
    return Message.objects.filter(pk=message_id).exists()


def message_first_reads(message_id: int) -> dict[datetime, int]:
    """First reads per hour (raises RedisError)."""
    read_events.first_reads_fold()
    return reads.read_hours(ref=f"m{int(message_id)}")


# Gathering readers costs one GETBIT per member of the audience: above this
# many members the per-day figures show first reads only (no active readers).
READERS_AUDIENCE_MAX = 200_000


def _audience_size(item: Item) -> int:
    if isinstance(item, Message):
        return item.audience_size if item.audience_size is not None and not item.everyone else _active_users()
    return int(_bulletin_users(item).count())


def _readers_of(item: Item | None) -> BitMap | None:
    """Its readers (raises RedisError, as a reader source must); None when there
    is no such item, it was never sent (no read state) or its audience is
    larger than ``READERS_AUDIENCE_MAX``."""
    if item is None or (isinstance(item, Message) and item.status in _NEVER_SENT):
        return None
    if _audience_size(item) > READERS_AUDIENCE_MAX:
        return None
    try:
        return item_readers(item=item)
    except InboxUnavailable as exc:
        raise RedisError(str(exc)) from exc


def message_readers(message_id: int) -> BitMap | None:
    return _readers_of(Message.objects.filter(pk=message_id).first())


def bulletin_exists(bulletin_id: int) -> bool:
    return Bulletin.objects.filter(pk=bulletin_id).exists()


def bulletin_first_reads(bulletin_id: int) -> dict[datetime, int]:
    """First reads per hour (raises RedisError)."""
    read_events.first_reads_fold()
    return reads.read_hours(ref=f"b{int(bulletin_id)}")


def bulletin_readers(bulletin_id: int) -> BitMap | None:
    return _readers_of(Bulletin.objects.filter(pk=bulletin_id).first())


# The kinds of item whose readers the activity pages show (the app's AppConfig names them).
READER_SOURCES = (
    activity.ReaderSource(
        kind="message", label="Message", exists=message_exists, first_reads=message_first_reads, readers=message_readers
    ),
    activity.ReaderSource(
        kind="bulletin",
        label="Bulletin",
        exists=bulletin_exists,
        first_reads=bulletin_first_reads,
        readers=bulletin_readers,
    ),
)
