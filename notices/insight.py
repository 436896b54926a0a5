"""Operator insight into one announcement (read use cases for the admin):
how reading went over time, and who on the targeted platforms has not read
it yet, so that a reminder can be sent to exactly them."""

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth import get_user_model
from django.db.models import Exists, OuterRef, Q
from pyroaring import BitMap
from redis.exceptions import RedisError

from accounts.models import Platform, UserPlatform
from insight import activity
from insight.reports import TimelinePoint, UserBatch, timeline, unread_scan, user_batches
from notices import readmodel
from notices.exceptions import ReadStateUnavailable
from notices.models import Announcement

NON_READERS_PAGE = 50
# Users checked per round trip; a page of non-readers may take several when
# most users have read it, bounded so one request stays short.
_SCAN_BATCH = 500
_SCAN_LIMIT = 20_000


def announcement_read_timeline(*, announcement: Announcement) -> list[TimelinePoint]:
    """First reads per hour since publication, with the running total (read-rate chart)."""
    try:
        hours = readmodel.read_hours(announcement_id=announcement.pk, platforms=announcement.platforms)
    except RedisError as exc:
        raise ReadStateUnavailable("Read statistics are unavailable; try again shortly.") from exc
    return timeline(hours)


# Readers over time on the activity dashboard (registered with insight.activity in apps.py).


def announcement_exists(announcement_id: int) -> bool:
    return Announcement.objects.filter(pk=announcement_id).exists()


def _platforms_of(announcement_id: int) -> list[str]:
    announcement = Announcement.objects.filter(pk=announcement_id).first()
    return list(announcement.platforms) if announcement is not None else []


def announcement_first_reads(announcement_id: int) -> dict[datetime, int]:
    """First reads per hour (raises RedisError)."""
    return readmodel.read_hours(announcement_id=announcement_id, platforms=_platforms_of(announcement_id))


def announcement_readers(announcement_id: int) -> BitMap:
    """The ids of every user who has read it (raises RedisError)."""
    return readmodel.readers(announcement_id=announcement_id, platforms=_platforms_of(announcement_id))


@dataclass(frozen=True)
class NonReadersPage:
    platform: str
    users: list[tuple[int, str]]  # (id, username)
    next_after: int | None  # pass as ``after_id`` for the next page; None at the end


def _platform_users(platform: str) -> Q:
    """Users on ``platform``: a row for it, or no rows at all and the default rule
    (staff are operators, everyone else users) picks it."""
    on_platform = Exists(UserPlatform.objects.filter(user=OuterRef("pk"), platform=platform))
    if platform == Platform.OPERATOR:
        default = ~Exists(UserPlatform.objects.filter(user=OuterRef("pk"))) & Q(is_staff=True)
    elif platform == Platform.USER:
        default = ~Exists(UserPlatform.objects.filter(user=OuterRef("pk"))) & Q(is_staff=False)
    else:
        return Q(on_platform)
    return Q(on_platform) | default


def announcement_non_readers(
    *, announcement: Announcement, platform: str, after_id: int = 0, limit: int = NON_READERS_PAGE
) -> NonReadersPage:
    """Users of ``platform`` (one the announcement targets) whose read bit is 0.

    Walks users in id order from PostgreSQL (primary-key index), a batch at a
    time, and checks each batch's bits with one pipelined GETBIT: no per-user
    query, no per-user rows for the announcement.
    """
    if platform not in announcement.platforms:
        return NonReadersPage(platform=platform, users=[], next_after=None)
    users = get_user_model().objects.filter(_platform_users(platform))

    def with_bits() -> Iterator[tuple[UserBatch, list[bool]]]:
        for batch in user_batches(users, after_id=int(after_id), size=_SCAN_BATCH):
            try:
                bits = readmodel.read_bits(
                    platform=platform, announcement_id=announcement.pk, user_ids=[pk for pk, _ in batch]
                )
            except RedisError as exc:
                raise ReadStateUnavailable("Read state is unavailable; try again shortly.") from exc
            yield batch, bits

    found, cursor, stopped = unread_scan(with_bits(), after_id=int(after_id), limit=limit, scan_limit=_SCAN_LIMIT)
    more = stopped and users.filter(pk__gt=cursor).exists()
    return NonReadersPage(platform=platform, users=found, next_after=cursor if more else None)


# The kind of item whose readers the activity pages show (the app's AppConfig names it).
READER_SOURCES = (
    activity.ReaderSource(
        kind="announcement",
        label="Announcement",
        exists=announcement_exists,
        first_reads=announcement_first_reads,
        readers=announcement_readers,
    ),
)
