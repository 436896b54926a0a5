"""Read use cases of announcements.

A user sees an announcement while it is live (``publish_at <= now < expire_at``)
and targets one of the user's platforms. Which ones are live, and which the
user read, comes from Redis (one script per platform of the user); what a
list shows of each announcement (``AnnouncementSummary``) comes from its
read-through entry in Redis, filled from PostgreSQL by primary key and
replaced by a tombstone after any change of those fields (``notices.projection``),
so a warm list page costs no SQL. With Redis down (or its read model
lost and being rebuilt, ``durability.healing``), lists and details
fall back to PostgreSQL: read flags come from the committed
``AnnouncementRead`` rows, which hold every acknowledged mark.

Lists are newest first by publish time (then id), pinned or not; ``pinned`` is
a flag for clients, and the pages show pinned ones in a section of their own.
"""

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import F, Q
from django.utils import timezone
from redis.exceptions import RedisError

from accounts.selectors import platform_user_counts, user_platforms
from core import readthrough
from core.api.errors import NotFound, ValidationFailed
from core.api.pagination import KeysetPage, decode_cursor, encode_cursor, keyset_page
from core.api.params import page_scope
from core.api.translations import localized
from durability import healing
from notices import keys as notice_keys
from notices import readmodel
from notices.exceptions import ReadStateUnavailable
from notices.models import MAX_ID, Announcement, AnnouncementRead

logger = logging.getLogger(__name__)

User = AbstractBaseUser | AnonymousUser
CURSOR_SCOPE = "announcements"
# Outbox topic of a mark accepted while Redis was down; payload
# {"announcement_id": int, "platforms": [str], "read": bool, "at_ms": int}, user_id set.
READ_TOPIC = "notices.read"


@dataclass(frozen=True)
class AnnouncementItem:
    announcement: Announcement
    read: bool


@dataclass(frozen=True)
class AnnouncementSummary:
    """What a list shows of an announcement, under the row's own names (the
    pages' templates read either). Times keep the row's microseconds."""

    pk: int
    title: str
    summary: str
    publish_at: datetime
    pinned: bool
    # {language code: {"title", "summary"?, ...}} (core.api.translations): picked when rendered.
    translations: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, row: Announcement) -> "AnnouncementSummary":
        return cls(
            int(row.pk), row.title, row.summary, row.publish_at, bool(row.pinned), _listed(row.translations or {})
        )

    def to_entry(self) -> dict[str, Any]:
        entry = {"t": self.title, "s": self.summary, "p": (self.publish_at - _EPOCH) // _MICROSECOND, "n": self.pinned}
        if self.translations:
            entry["l"] = self.translations
        return entry

    @classmethod
    def from_entry(cls, pk: int, value: dict[str, Any]) -> "AnnouncementSummary":
        publish_at = _EPOCH + timedelta(microseconds=int(value["p"]))
        return cls(int(pk), str(value["t"]), str(value["s"]), publish_at, bool(value["n"]), dict(value.get("l") or {}))

    def shown(self, language: str | None) -> dict[str, Any]:
        """Title and summary as a reader of ``language`` sees them."""
        return localized({"title": self.title, "summary": self.summary}, self.translations, language)


def _listed(translations: dict[str, Any]) -> dict[str, Any]:
    """What a list shows of the translations: titles and summaries (bodies stay in the row)."""
    return {
        code: {name: text for name, text in fields.items() if name in ("title", "summary")}
        for code, fields in translations.items()
    }


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
# Every change of a summary's fields replaces its entry (after commit, through
# the outbox when Redis fails then), so the TTL only lets entries of
# announcements no longer listed leave Redis.
SUMMARY_TTL_SECONDS = 3600


@dataclass(frozen=True)
class AnnouncementListItem:
    announcement: AnnouncementSummary
    read: bool


@dataclass(frozen=True)
class AnnouncementPage:
    items: list[AnnouncementListItem]
    next_cursor: str | None


def _summary_policy() -> readthrough.Policy:
    return readthrough.Policy(
        fresh=float(SUMMARY_TTL_SECONDS),
        stale=0.0,
        miss=float(readthrough.auth_policy().miss),
    )


def announcement_summaries(*, announcement_ids: Sequence[int]) -> dict[int, AnnouncementSummary]:
    """The summaries of these announcements that exist: their entries in one
    round trip, the rest from PostgreSQL in one query (and stored)."""
    ids = [int(pk) for pk in announcement_ids]

    def load(positions: list[int]) -> list[Any]:
        wanted = [ids[i] for i in positions]
        rows = Announcement.objects.only("title", "summary", "publish_at", "pinned", "translations").in_bulk(wanted)
        return [AnnouncementSummary.of(rows[pk]).to_entry() if pk in rows else None for pk in wanted]

    values = readthrough.read_through_many([notice_keys.summary(pk) for pk in ids], load, policy=_summary_policy())
    return {pk: AnnouncementSummary.from_entry(pk, value) for pk, value in zip(ids, values, strict=True) if value}


def _visible_from_redis(*, user: User, now: datetime) -> dict[int, tuple[int, bool]]:
    """id -> (publish ms, read) over the user's platforms; read if read on any of them."""
    user_id = readmodel.user_id_of(user)
    readmodel.user_slot(user_id)  # out-of-range ids fail before Redis
    healing.require_ready()  # a read model being rebuilt is answered like a Redis that is down
    visible: dict[int, tuple[int, bool]] = {}
    for platform in user_platforms(user=user):
        for pk, (publish_ms, read) in readmodel.read_state(platform=platform, user_id=user_id, now=now).items():
            seen = visible.get(pk)
            visible[pk] = (publish_ms, read or (seen is not None and seen[1]))
    return visible


def _page_from_redis(
    *, user: User, now: datetime, after: tuple[int, int] | None, limit: int
) -> list[tuple[int, int, bool]]:
    """Up to ``limit`` (publish ms, id, read) newest first over the user's platforms.

    Each platform gives its own first ``limit`` (its page, read from the bits
    of those announcements only); an announcement on two platforms has the same
    place in both, so the merged first ``limit`` are in every platform's page
    that holds them, and it is read if read on any of them.
    """
    user_id = readmodel.user_id_of(user)
    readmodel.user_slot(user_id)  # out-of-range ids fail before Redis
    healing.require_ready()  # a read model being rebuilt is answered like a Redis that is down
    merged: dict[int, tuple[int, bool]] = {}
    for platform in user_platforms(user=user):
        for publish_ms, pk, read in readmodel.read_page(
            platform=platform, user_id=user_id, now=now, after=after, limit=limit
        ):
            seen = merged.get(pk)
            merged[pk] = (publish_ms, read or (seen is not None and seen[1]))
    order = sorted(((ms, pk) for pk, (ms, _) in merged.items()), reverse=True)[:limit]
    return [(ms, pk, merged[pk][1]) for ms, pk in order]


def _live_queryset(*, user: User, now: datetime) -> Any:
    """PostgreSQL's view of the same set (fallback, and the source of rows)."""
    return (
        Announcement.objects.filter(platform_rows__platform__in=user_platforms(user=user), publish_at__lte=now)
        .filter(Q(expire_at__isnull=True) | Q(expire_at__gt=now))
        .distinct()
    )


def degraded_read_ids(*, user: User, announcement_ids: list[int]) -> set[int]:
    """Which of these announcements the user has read, without Redis: read on any
    of the user's platforms the announcement still targets (Redis drops a
    platform's bitmap when the platform is taken off the announcement)."""
    if not announcement_ids:
        return set()
    # announcementread_user_idx serves the lookup by user and announcement.
    rows = AnnouncementRead.objects.filter(
        user_id=readmodel.user_id_of(user),
        announcement_id__in=announcement_ids,
        platform__in=user_platforms(user=user),
        announcement__platform_rows__platform=F("platform"),
    )
    return set(rows.values_list("announcement_id", flat=True))


def announcement_counts(*, user: User, now: datetime | None = None) -> dict[str, int]:
    """``{"read", "unread"}`` over the announcements live on the user's platforms.

    No SQL when the platform cache and the process's id lists are warm.
    Without Redis: the live ids from PostgreSQL, read flags from ``degraded_read_ids``.
    """
    if not user.is_authenticated:
        return {"read": 0, "unread": 0}
    now = now or timezone.now()
    user_id = readmodel.user_id_of(user)
    readmodel.user_slot(user_id)  # out-of-range ids fail before Redis
    try:
        healing.require_ready()
        platforms = user_platforms(user=user)
        if len(platforms) == 1:  # the cached count (several platforms need the per-item union)
            live, read_count = readmodel.read_count(platform=platforms[0], user_id=user_id, now=now)
            return {"read": read_count, "unread": live - read_count}
        visible = _visible_from_redis(user=user, now=now)
    except RedisError:
        logger.warning("redis unavailable; counting announcements from the database")
        live_ids = list(_live_queryset(user=user, now=now).values_list("pk", flat=True))
        read_count = len(degraded_read_ids(user=user, announcement_ids=live_ids))
        return {"read": read_count, "unread": len(live_ids) - read_count}
    read = sum(1 for _, is_read in visible.values() if is_read)
    return {"read": read, "unread": len(visible) - read}


# The script ``announcement_count_call`` describes a call of: a caller that runs
# the call in its own round trip queues it on this (``COUNT_SCRIPT.queue``).
COUNT_SCRIPT = readmodel.COUNT_SCRIPT


def announcement_count_call(*, user: User, now: datetime) -> readmodel.CountCall | None:
    """The cached count's script call of a one-platform user, for a caller that
    runs it in its own round trip (``COUNT_SCRIPT.queue``); None when
    ``announcement_counts`` must answer instead (several platforms)."""
    platforms = user_platforms(user=user)
    if not user.is_authenticated or len(platforms) != 1:
        return None
    return readmodel.read_count_call(platform=platforms[0], user_id=readmodel.user_id_of(user), now=now)


def announcement_count_settle(call: readmodel.CountCall, reply: Any) -> dict[str, int]:
    """``announcement_counts`` from a queued call's reply (see ``announcement_count_call``)."""
    live, read = readmodel.read_count_settle(call, readmodel.COUNT_SCRIPT.settle(reply, call.keys, call.args()))
    return {"read": read, "unread": live - read}


def _decode(cursor: str | None) -> tuple[int, int] | None:
    if not cursor:
        return None
    payload = decode_cursor(cursor, scope=CURSOR_SCOPE)
    try:
        return int(payload["p"]), int(payload["i"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValidationFailed(
            "The cursor is not valid.", code="invalid_cursor", fields={"cursor": ["Invalid cursor."]}
        ) from exc


def announcement_list(
    *, user: User, limit: int, cursor: str | None = None, now: datetime | None = None
) -> AnnouncementPage:
    """A page of the user's live announcements, newest first, with read flags.

    The cursor is the (publish ms, id) of the last item: the next page starts
    strictly below it, so items arriving meanwhile never repeat or shift a page.
    """
    now = now or timezone.now()
    after = _decode(cursor)
    if not user.is_authenticated:
        return AnnouncementPage(items=[], next_cursor=None)
    try:
        keyed = _page_from_redis(user=user, now=now, after=after, limit=limit + 1)
        page_keys = keyed[:limit]
        summaries = announcement_summaries(announcement_ids=[pk for _, pk, _ in page_keys])
        items = [AnnouncementListItem(summaries[pk], read) for _, pk, read in page_keys if pk in summaries]
        more = len(keyed) > limit
    except RedisError:
        logger.warning("redis unavailable; listing announcements from the database")
        qs = _live_queryset(user=user, now=now).order_by("-publish_at", "-id")
        if after is not None:
            after_at = readmodel.from_ms(after[0])
            qs = qs.filter(Q(publish_at__lt=after_at) | Q(publish_at=after_at, id__lt=after[1]))
        rows_list = list(qs[: limit + 1])
        more = len(rows_list) > limit
        read_ids = degraded_read_ids(user=user, announcement_ids=[row.pk for row in rows_list[:limit]])
        items = [AnnouncementListItem(AnnouncementSummary.of(row), row.pk in read_ids) for row in rows_list[:limit]]
    return _page(items, more=more)


def _page(items: list[AnnouncementListItem], *, more: bool) -> AnnouncementPage:
    next_cursor = None
    if more and items:
        last = items[-1].announcement
        next_cursor = encode_cursor({"p": readmodel.to_ms(last.publish_at), "i": last.pk}, scope=CURSOR_SCOPE)
    return AnnouncementPage(items=items, next_cursor=next_cursor)


def announcement_get(*, user: User, announcement_id: int, now: datetime | None = None) -> AnnouncementItem:
    """One announcement live on one of the user's platforms; NotFound otherwise."""
    if not user.is_authenticated or not 0 < int(announcement_id) <= MAX_ID:
        raise NotFound("Announcement not found.")
    now = now or timezone.now()
    try:
        user_id = readmodel.user_id_of(user)
        readmodel.user_slot(user_id)  # out-of-range ids fail before Redis
        healing.require_ready()
        found = [
            readmodel.read_flags(platform=platform, user_id=user_id, ids=[int(announcement_id)], now=now)
            for platform in user_platforms(user=user)
        ]
        flags = [flag[int(announcement_id)][1] for flag in found if int(announcement_id) in flag]
        if not flags:
            # Not a 404 from a Redis that lost its data a moment ago.
            healing.confirm_ready()
            raise NotFound("Announcement not found.")
        read = any(flags)
        announcement = Announcement.objects.filter(pk=announcement_id).first()
    except RedisError:
        announcement = _live_queryset(user=user, now=now).filter(pk=announcement_id).first()
        if announcement is None:
            raise NotFound("Announcement not found.") from None
        read = announcement.pk in degraded_read_ids(user=user, announcement_ids=[announcement.pk])
    if announcement is None:
        raise NotFound("Announcement not found.")
    return AnnouncementItem(announcement, read)


def announcement_pinned_unread(*, user: User, now: datetime | None = None) -> list[Announcement]:
    """Live pinned announcements the user has not read (the banner), newest first."""
    if not user.is_authenticated:
        return []
    now = now or timezone.now()
    try:
        visible = _visible_from_redis(user=user, now=now)
    except RedisError:
        pinned = list(_live_queryset(user=user, now=now).filter(pinned=True).order_by("-publish_at", "-id"))
        read_ids = degraded_read_ids(user=user, announcement_ids=[row.pk for row in pinned])
        return [row for row in pinned if row.pk not in read_ids][:5]
    unread = [pk for pk, (_, read) in visible.items() if not read]
    if not unread:
        return []
    return list(Announcement.objects.filter(pk__in=unread, pinned=True).order_by("-publish_at", "-id")[:5])


def announcement_pinned(*, user: User, now: datetime | None = None) -> list[AnnouncementItem]:
    """Every live pinned announcement of the user with read flags (the page's pinned section)."""
    if not user.is_authenticated:
        return []
    now = now or timezone.now()
    try:
        visible = _visible_from_redis(user=user, now=now)
    except RedisError:
        pinned = list(_live_queryset(user=user, now=now).filter(pinned=True).order_by("-publish_at", "-id"))
        read_ids = degraded_read_ids(user=user, announcement_ids=[row.pk for row in pinned])
        return [AnnouncementItem(row, row.pk in read_ids) for row in pinned]
    rows = Announcement.objects.filter(pk__in=list(visible), pinned=True).order_by("-publish_at", "-id")
    return [AnnouncementItem(row, visible[row.pk][1]) for row in rows]


def announcement_stats(*, announcement: Announcement) -> dict[str, Any]:
    """Readers per targeted platform, with the platform's user count and ratio.

    ``read_total`` adds the platforms up: a user on two targeted platforms who
    read it counts on each (read state is kept per platform).
    """
    platforms = announcement.platforms
    try:
        reads = readmodel.read_counts(announcement_id=announcement.pk, platforms=platforms)
    except RedisError as exc:
        raise ReadStateUnavailable("Read statistics are unavailable; try again shortly.") from exc
    users = platform_user_counts()
    by_platform = {
        platform: {
            "read": reads[platform],
            "users": users.get(platform, 0),
            "ratio": round(reads[platform] / users[platform], 4) if users.get(platform) else 0.0,
        }
        for platform in platforms
    }
    return {"read_total": sum(reads.values()), "by_platform": by_platform}


def announcement_read_ratio(*, announcement: Announcement, user_counts: dict[str, int]) -> float | None:
    """Readers over reachable users across the targeted platforms (admin column); None without Redis."""
    platforms = announcement.platforms
    try:
        reads = readmodel.read_counts(announcement_id=announcement.pk, platforms=platforms)
    except RedisError:
        return None
    reachable = sum(user_counts.get(p, 0) for p in platforms)
    return sum(reads.values()) / reachable if reachable else 0.0


ANNOUNCEMENT_STATUSES = ("scheduled", "live", "expired")


def announcement_manage_list(
    *,
    limit: int,
    cursor: str | None,
    status: str | None = None,
    platform: str | None = None,
    pinned: bool | None = None,
    since: datetime | None = None,
    now: datetime | None = None,
) -> KeysetPage[Announcement]:
    """Operators' read-back: every announcement newest first (by creation), whatever
    its state; ``status`` as ``Announcement.status_at`` tells it at ``now``."""
    now = now or timezone.now()
    filters = {"status": status, "platform": platform, "pinned": pinned, "since": since}
    rows = Announcement.objects.prefetch_related("platform_rows")
    if status == "scheduled":
        rows = rows.filter(publish_at__gt=now)
    elif status == "live":
        rows = rows.filter(Q(publish_at__lte=now) & (Q(expire_at__isnull=True) | Q(expire_at__gt=now)))
    elif status == "expired":
        rows = rows.filter(publish_at__lte=now, expire_at__lte=now)
    if platform is not None:
        rows = rows.filter(platform_rows__platform=platform)
    if pinned is not None:
        rows = rows.filter(pinned=pinned)
    if since is not None:
        rows = rows.filter(created_at__gt=since)
    return keyset_page(rows, limit=limit, cursor=cursor, scope=page_scope("manage-announcements", filters))


def announcement_manage_get(*, announcement_id: int) -> Announcement:
    try:
        return Announcement.objects.prefetch_related("platform_rows").get(pk=announcement_id)
    except Announcement.DoesNotExist as exc:
        raise NotFound("No such announcement.") from exc
