"""Daily active users as Redis bitmaps, and the figures drawn from them.

Recording: every authenticated request (token or session, see
accounts/authentication.py) marks its user active for the day (UTC): one bit in
the day's bitmap of the user's chunk (``keys.activity_day``). Each process
remembers which users it marked today (a compressed bitmap, reset when the
day changes), so a user costs one Redis round trip per process and day and
nothing after. Recording never fails a request: a RedisError (the breaker
of core/breaker.py makes a dead Redis fail at once) is logged and dropped,
and the user is tried again on a later request.

Figures: DAU is the BITCOUNT of one day, WAU and MAU the BITCOUNT of the
BITOP OR of 7 and 30 days, N-day retention of a day the BITCOUNT of the
BITOP AND of that day and the day N days later over that day's BITCOUNT.
Each is summed over the chunks; the keys of one BITOP share their chunk's
hash tag (core/keys.py says why per chunk).

Readers of an item over time: an app names a ``ReaderSource`` for each
kind of item it owns on its AppConfig (``reader_sources``;
``core.contributions``: core knows no app). Per day it gives the item's first
reads (from the app's per-hour counters) and, when the app keeps a reader
bitmap of the item, how many of its readers were active that day: the
intersection of the reader bitmap with the day's bitmap. The reader bitmaps
live in the app's own slots, so they are intersected here, in memory, with
compressed bitmaps, not by a cross-slot BITOP.
"""

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Max
from django.utils import timezone
from pyroaring import BitMap
from redis.exceptions import RedisError

from core.bitmaps import bitmap_from_redis
from core.contributions import contributed_each
from insight import readmodel

logger = logging.getLogger(__name__)

WEEK, MONTH = 7, 30
RETENTION_OFFSETS = (1, 7, 30)


def day_name(day: date) -> str:
    return day.strftime("%Y%m%d")


def today() -> date:
    return timezone.now().astimezone(UTC).date()


def _chunk_size() -> int:
    return int(settings.MESSAGECENTER_BITMAP_CHUNK_USERS)


# --- recording --------------------------------------------------------------------------


class _MarkedToday:
    """The users this process marked on one day (thread-safe)."""

    def __init__(self) -> None:
        self.day = ""
        self.users = BitMap()
        self.lock = threading.Lock()

    def seen(self, day: str, user_id: int) -> bool:
        with self.lock:
            if day != self.day:
                if day < self.day:
                    return False  # a late request of yesterday: not remembered, costs its command
                self.day, self.users = day, BitMap()
            return user_id in self.users

    def add(self, day: str, user_id: int) -> None:
        with self.lock:
            if day == self.day:
                self.users.add(user_id)

    def forget(self) -> None:
        with self.lock:
            self.day, self.users = "", BitMap()


_marked = _MarkedToday()


def _due(user_id: int, now: datetime | None) -> tuple[str, int, int, int] | None:
    """(day, chunk, offset, seconds kept) of the user's mark today; None when
    activity is off, the id is no user's, or this process marked them today."""
    if not settings.MESSAGECENTER_ACTIVITY_ENABLED or int(user_id) < 0:
        return None
    day = day_name((now or timezone.now()).astimezone(UTC).date())
    if _marked.seen(day, int(user_id)):
        return None
    chunk, offset = divmod(int(user_id), _chunk_size())
    return day, chunk, offset, int(settings.MESSAGECENTER_ACTIVITY_KEEP_DAYS) * 86_400


def forget_marked() -> None:
    """Forget which users this process marked (tests, and after Redis lost its data)."""
    _marked.forget()


def record_active(*, user_id: int, now: datetime | None = None) -> bool:
    """Mark the user active today; True when it cost a Redis command. Never raises."""
    due = _due(user_id, now)
    if due is None:
        return False
    day, chunk, offset, keep = due
    user_id = int(user_id)
    try:
        readmodel.activity_mark(chunk=chunk, offset=offset, day=day, keep_seconds=keep)
    except (RedisError, OSError):
        logger.debug("activity of user %s not recorded (Redis unavailable)", user_id)
        return True
    _marked.add(day, user_id)
    return True


# --- figures ------------------------------------------------------------------------------


def _chunks(max_user_id: int | None) -> range:
    if max_user_id is None:
        max_user_id = int(get_user_model().objects.aggregate(top=Max("pk"))["top"] or 0)
    return range(int(max_user_id) // _chunk_size() + 1)


def _window(end: date, length: int) -> list[str]:
    return [day_name(end - timedelta(days=back)) for back in range(length)]


def _count(day_sets: Sequence[Sequence[str]], *, op: str, max_user_id: int | None) -> list[int]:
    totals = [0] * len(day_sets)
    for chunk in _chunks(max_user_id):
        for index, value in enumerate(readmodel.activity_counts(chunk=chunk, day_sets=day_sets, op=op)):
            totals[index] += value
    return totals


@dataclass(frozen=True)
class DayFigures:
    day: date
    dau: int  # active that day
    wau: int  # active on any of the 7 days ending that day
    mau: int  # active on any of the 30 days ending that day


def activity_series(*, end: date, days: int, max_user_id: int | None = None) -> list[DayFigures]:
    """DAU, WAU and MAU of each of the ``days`` days ending on ``end``, oldest first.
    Raises RedisError."""
    listed = [end - timedelta(days=back) for back in range(days - 1, -1, -1)]
    day_sets: list[list[str]] = []
    for day in listed:
        day_sets += [[day_name(day)], _window(day, WEEK), _window(day, MONTH)]
    counts = _count(day_sets, op="OR", max_user_id=max_user_id)
    return [DayFigures(day, *counts[3 * i : 3 * i + 3]) for i, day in enumerate(listed)]


@dataclass(frozen=True)
class Retention:
    day: date
    active: int  # active that day
    kept: dict[int, int | None]  # offset N -> of them, active N days later (None: not yet known)

    def share(self, offset: int) -> float | None:
        kept = self.kept.get(offset)
        return None if kept is None or self.active == 0 else kept / self.active


def retention(
    *, end: date, days: int, offsets: Sequence[int] = RETENTION_OFFSETS, max_user_id: int | None = None
) -> list[Retention]:
    """For each of the ``days`` days ending on ``end`` (oldest first): its active
    users and how many of them were active again ``N`` days later (AND of the two
    days), for each offset whose later day is not after ``end``. Raises RedisError."""
    listed = [end - timedelta(days=back) for back in range(days - 1, -1, -1)]
    day_sets: list[list[str]] = []
    wanted: list[tuple[int, int]] = []  # (row, offset) per pair counted
    for row, day in enumerate(listed):
        for offset in offsets:
            later = day + timedelta(days=offset)
            if later <= end:
                day_sets.append([day_name(day), day_name(later)])
                wanted.append((row, offset))
    both = _count(day_sets, op="AND", max_user_id=max_user_id) if day_sets else []
    active = _count([[day_name(day)] for day in listed], op="OR", max_user_id=max_user_id)
    kept: list[dict[int, int | None]] = [dict.fromkeys(offsets) for _ in listed]
    for (row, offset), value in zip(wanted, both, strict=True):
        kept[row][offset] = value
    return [Retention(day=day, active=active[i], kept=kept[i]) for i, day in enumerate(listed)]


# --- readers of items (the apps name their kinds) --------------------------------------------


@dataclass(frozen=True)
class ReaderSource:
    """What an app tells core about one kind of item.

    ``first_reads(item_id)``: first reads per hour (UTC hour -> count).
    ``readers(item_id)``: the ids of every user who has read it, or None when the
    app keeps no per-item reader bitmap (only first reads are shown then).
    ``exists(item_id)``: whether there is such an item. The callables raise
    RedisError when their read model is unavailable."""

    kind: str
    label: str
    exists: Callable[[int], bool]
    first_reads: Callable[[int], Mapping[datetime, int]]
    readers: Callable[[int], BitMap | None]


def reader_sources() -> list[ReaderSource]:
    """Every app's kinds of item (their AppConfig's ``reader_sources``), by kind."""
    return sorted(contributed_each("reader_sources"), key=lambda source: source.kind)


def reader_source(kind: str) -> ReaderSource | None:
    return next((source for source in reader_sources() if source.kind == kind), None)


@dataclass(frozen=True)
class ItemDay:
    day: date
    first_reads: int  # users who read it for the first time that day
    cumulative: int  # first reads up to and including that day
    active_readers: int | None  # its readers (so far) who were active that day


def item_readers_by_day(*, source: ReaderSource, item_id: int, end: date, days: int) -> list[ItemDay]:
    """The item's readers over the ``days`` days ending on ``end``, oldest first.
    Raises RedisError."""
    listed = [end - timedelta(days=back) for back in range(days - 1, -1, -1)]
    per_day: dict[date, int] = {}
    before = 0
    for hour, count in source.first_reads(item_id).items():
        day = hour.astimezone(UTC).date()
        if day < listed[0]:
            before += int(count)
        else:
            per_day[day] = per_day.get(day, 0) + int(count)
    readers = source.readers(item_id)
    active: list[int | None] = [None] * len(listed)
    if readers is not None:
        active = [0] * len(listed)
        if len(readers):
            size = _chunk_size()
            for chunk in range(readers.min() // size, readers.max() // size + 1):
                raw = readmodel.activity_days_raw(chunk=chunk, days=[day_name(day) for day in listed])
                for index, data in enumerate(raw):
                    if data:
                        counted = active[index] or 0
                        active[index] = counted + readers.intersection_cardinality(
                            bitmap_from_redis(data, base=chunk * size)
                        )
    result, total = [], before
    for index, day in enumerate(listed):
        total += per_day.get(day, 0)
        result.append(ItemDay(day=day, first_reads=per_day.get(day, 0), cumulative=total, active_readers=active[index]))
    return result


# --- chart ---------------------------------------------------------------------------------

CHART_WIDTH, CHART_HEIGHT = 600, 200


@dataclass(frozen=True)
class Line:
    name: str
    colour: str
    points: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    top: int  # the value at the top of the axis
    first: date
    last: date
    lines: list[Line]


def series_chart(series: Sequence[DayFigures]) -> Chart | None:
    """Coordinates of the DAU / WAU / MAU lines, drawn as server-side SVG."""
    if not series:
        return None
    top = max(max(point.mau for point in series), 1)
    step = CHART_WIDTH / max(len(series) - 1, 1)

    def points(values: Sequence[int]) -> str:
        return " ".join(
            f"{i * step:.1f},{CHART_HEIGHT - value / top * CHART_HEIGHT:.1f}" for i, value in enumerate(values)
        )

    return Chart(
        width=CHART_WIDTH,
        height=CHART_HEIGHT,
        top=top,
        first=series[0].day,
        last=series[-1].day,
        lines=[
            Line("MAU", "#9e9e9e", points([p.mau for p in series])),
            Line("WAU", "#2e7d32", points([p.wau for p in series])),
            Line("DAU", "#1565c0", points([p.dau for p in series])),
        ],
    )
