"""The user's inbox actions beyond marks: archive, unarchive, snooze, and
bulk actions (read, unread, archive, unarchive, delete) over many items.

PostgreSQL holds the state: one ``InboxItemState`` row per user and item
archived or snoozed (never a row per recipient of a broadcast). The row is
written in a transaction; after commit ``projection.item_place_changed``
puts the item where the row says (``messagecenter.projection.item_places``,
the one path; the outbox keeps it when Redis fails, and the rebuild replays
every row). The PostgreSQL fallback reads the rows directly, so reads while
Redis is down agree.

Behaviour at the edges:
- archiving an archived item, or unarchiving an item in the list, changes
  nothing (204);
- unarchiving a snoozed item changes nothing: it stays snoozed;
- archiving a snoozed item cancels the snooze: it is archived at its own
  time, still unread (the snooze cleared its flag);
- snoozing an archived item takes it out of the archive: it comes back to
  the list, unread, at the wake time;
- deleting an archived or snoozed item deletes it (its state row goes);
- read and unread reach live and archived items (an archived item keeps its
  flag for when it comes back); a snoozed item is away until it wakes.
"""

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone
from redis.exceptions import RedisError

from core.api.errors import NotFound, ValidationFailed
from durability import healing
from messagecenter import fallback, projection
from messagecenter.fill import inbox_served, part_writing
from messagecenter.models import InboxHidden, InboxItemState
from messagecenter.readmodel import InboxEntry, inbox, to_ms
from messagecenter.services.grouping import group_row_read, group_rows_acted
from messagecenter.services.inbox import MAX_ITEM_ID_LENGTH, _direct, _ref, redis_after_commit
from messagecenter.services.read_state import read_marks_commit

logger = logging.getLogger(__name__)

# A snooze ends within a year: further ahead is almost surely a mistake.
SNOOZE_LONGEST = timedelta(days=365)
BULK_ACTIONS = ("read", "unread", "archive", "unarchive", "delete")
BULK_MAX_IDS = 100

NOT_FOUND = "No such item in your inbox."


def _places(user_id: int, refs: Sequence[str], now: datetime) -> dict[str, str]:
    """ref -> where it is (live, archived, snoozed) for the refs in this user's
    inbox: Redis when it answers (a miss is checked against a rebuild), else PostgreSQL."""
    try:
        if _direct(user_id):
            places = inbox_served(user_id, lambda: inbox.inbox_places(user_id=user_id, refs=refs, now_ms=to_ms(now)))
            if len(places) < len(refs):
                healing.confirm_ready()  # not a miss from a Redis that lost its data a moment ago
            return places
    except RedisError:
        logger.warning("redis unavailable; inbox places of user %s from PostgreSQL", user_id)
    return fallback.inbox_places(user_id=user_id, refs=refs, now=now)


def _place(user_id: int, ref: str, now: datetime) -> str:
    place = _places(user_id, [ref], now).get(ref)
    if place is None:
        raise NotFound(NOT_FOUND)
    return place


def _state_put(*, user_id: int, refs: Sequence[str], now: datetime, **values: object) -> None:
    """Write the rows and ask for their projection after commit."""
    with transaction.atomic():
        for ref in refs:
            InboxItemState.objects.update_or_create(
                user_id=user_id, item_id=ref, defaults={**values, "updated_at": now}
            )
        projection.item_place_changed(user_id, refs)


def inbox_archive(*, user: AbstractBaseUser, item_id: str, now: datetime | None = None) -> None:
    """Archive an item: out of the list and every count, listed with ``archived``."""
    now = now or timezone.now()
    ref = _ref(item_id)
    place = _place(int(user.pk), ref, now)
    with part_writing(int(user.pk)):
        _archive(user_id=int(user.pk), places={ref: place}, now=now)
        # Archiving a grouped row ends its group, once the archive is committed and projected.
        transaction.on_commit(lambda: group_row_read(user_id=int(user.pk), ref=ref))


def _archive(*, user_id: int, places: dict[str, str], now: datetime) -> None:
    snoozed = [ref for ref, place in places.items() if place == inbox.SNOOZED]
    others = [ref for ref, place in places.items() if place == inbox.LIVE]
    with transaction.atomic():
        if snoozed:  # the snooze is cancelled: archived at the item's own time
            _state_put(user_id=user_id, refs=snoozed, now=now, archived=True, snoozed_until=None)
        if others:  # a woken snooze keeps its place
            _state_put(user_id=user_id, refs=others, now=now, archived=True)


def inbox_unarchive(*, user: AbstractBaseUser, item_id: str, now: datetime | None = None) -> None:
    """Put an archived item back in the list as it was (read flag kept)."""
    now = now or timezone.now()
    ref = _ref(item_id)
    place = _place(int(user.pk), ref, now)
    if place == inbox.ARCHIVED:
        with part_writing(int(user.pk)):
            _unarchive(user_id=int(user.pk), refs=[ref], now=now)


def _unarchive(*, user_id: int, refs: Sequence[str], now: datetime) -> None:
    """Back in the list from ``now`` on (the row keeps its snooze fields: they
    still tell the fallback when the item was away)."""
    _state_put(user_id=user_id, refs=refs, now=now, archived=False, listed_at=now)


def inbox_snooze(*, user: AbstractBaseUser, item_id: str, until: datetime, now: datetime | None = None) -> None:
    """Take an item out of the list and the counts until ``until``; then it is back, unread, at that time."""
    now = now or timezone.now()
    if until <= now:
        raise ValidationFailed(
            "A snooze ends in the future.", code="invalid_until", fields={"until": ["Give a time in the future."]}
        )
    if until > now + SNOOZE_LONGEST:
        raise ValidationFailed(
            "A snooze ends within a year.", code="invalid_until", fields={"until": ["Give a time within a year."]}
        )
    ref = _ref(item_id)
    user_id = int(user.pk)
    _place(user_id, ref, now)
    with part_writing(user_id), transaction.atomic():
        _state_put(user_id=user_id, refs=[ref], now=now, archived=False, snoozed_until=until, snoozed_at=now)
        # The snooze leaves the item unread (snooze.lua clears the bit in Redis).
        read_marks_commit(user_id=user_id, entries=_entries([ref], now), read=False, now=now)
        # Snoozing a grouped row snoozes its group (its older items are out of
        # the list already) and ends it: an item of the key arriving while it
        # sleeps starts a new row instead of taking this one out of the snooze.
        transaction.on_commit(lambda: group_row_read(user_id=user_id, ref=ref))


def inbox_bulk(*, user: AbstractBaseUser, action: str, item_ids: Sequence[str], now: datetime | None = None) -> int:
    """Apply ``action`` to the given items; returns how many of them are in
    this user's inbox (the others are ignored: never revealed)."""
    _bulk_check(action=action, item_ids=item_ids)
    now = now or timezone.now()
    user_id = int(user.pk)
    refs = [r for r in dict.fromkeys(item_ids) if r and len(r) <= MAX_ITEM_ID_LENGTH and "|" not in r]
    places = _places(user_id, refs, now) if refs else {}
    if not places:
        return 0
    with part_writing(user_id):
        _bulk_apply(user_id=user_id, action=action, places=places, now=now)
        # The rows act for their groups, after the commit and the rows' own Redis writes.
        acted = list(places)
        transaction.on_commit(lambda: group_rows_acted(user_id=user_id, refs=acted, action=action))
    return len(places)


def _bulk_check(*, action: str, item_ids: Sequence[str]) -> None:
    """A known action over 1 to BULK_MAX_IDS ids, else a 400 before anything is read."""
    if action not in BULK_ACTIONS:
        raise ValidationFailed(
            f"Unknown action {action!r}.",
            code="invalid_action",
            fields={"action": [f"Choose from {', '.join(BULK_ACTIONS)}."]},
        )
    if not 1 <= len(item_ids) <= BULK_MAX_IDS:
        raise ValidationFailed(
            f"Give 1 to {BULK_MAX_IDS} ids.", code="invalid_ids", fields={"ids": [f"Give 1 to {BULK_MAX_IDS} ids."]}
        )


def _bulk_apply(*, user_id: int, action: str, places: dict[str, str], now: datetime) -> None:
    """Apply a checked bulk action to the items found (ref -> place). Marks skip
    snoozed items (away until they wake), as do archiving archived ones and
    unarchiving anything not archived."""
    if action in ("read", "unread"):
        markable = [r for r, p in places.items() if p != inbox.SNOOZED]
        _bulk_mark(user_id=user_id, refs=markable, read=action == "read", now=now)
    elif action == "archive":
        _archive(user_id=user_id, places={r: p for r, p in places.items() if p != inbox.ARCHIVED}, now=now)
    elif action == "unarchive":
        archived = [r for r, p in places.items() if p == inbox.ARCHIVED]
        if archived:
            _unarchive(user_id=user_id, refs=archived, now=now)
    else:
        _bulk_hide(user_id=user_id, refs=list(places), now=now)


def _entries(refs: Sequence[str], now: datetime) -> list[InboxEntry]:
    """The items' entries (month and offset of their read bit), from PostgreSQL."""
    return [entry for entry in projection.item_entries(refs, now).values() if entry is not None]


def _bulk_mark(*, user_id: int, refs: Sequence[str], read: bool, now: datetime) -> None:
    if not refs:
        return
    now_ms = to_ms(now)
    entries = _entries(refs, now)
    with transaction.atomic():
        read_marks_commit(user_id=user_id, entries=entries, read=read, now=now)
        # One script call for all of them (bulk_mark.lua).
        members = [e.member for e in entries]
        redis_after_commit(
            user_id=user_id,
            apply=lambda: inbox.inbox_mark_many(user_id=user_id, members=members, read=read, now_ms=now_ms),
        )


def _bulk_hide(*, user_id: int, refs: Sequence[str], now: datetime) -> None:
    if not refs:
        return
    now_ms = to_ms(now)
    with transaction.atomic():
        InboxHidden.objects.bulk_create(
            [InboxHidden(user_id=user_id, item_id=ref) for ref in refs], ignore_conflicts=True
        )
        InboxItemState.objects.filter(user_id=user_id, item_id__in=refs).delete()
        redis_after_commit(user_id=user_id, apply=lambda: _hide_many(user_id=user_id, refs=refs, now_ms=now_ms))


def _hide_many(*, user_id: int, refs: Sequence[str], now_ms: int) -> None:
    members = inbox.inbox_members(refs=refs)
    inbox.inbox_hide_many(user_id=user_id, members=list(members.values()), now_ms=now_ms)
