"""A user's part of the read model, filled from PostgreSQL on the user's first read.

Redis keeps what users share (bulletins, the pull index and its messages'
details, subscriber sets: the rebuild restores those, ``services.rebuild``)
and each user's own part (inbox zsets, read bit-sets, groups, hidden, parked
items, answers) as a cache of PostgreSQL. The details of pushed items and
notifications are shared too, but read only by the users who hold the item:
the fill brings back those of its user's items that Redis lacks. The state
hash's ``fill`` field names the read model generation (``durability.healing``)
the user was filled for; a user without it (Redis lost its data, came back
older, or never held this user) is filled here: what is left of it is
dropped (a stale copy is not trusted), then it is written again in the order
a restore needs:

- the committed read state first, so every item lands read or unread as
  PostgreSQL says; then memberships, mute periods, hidden items and ended
  groups, which the deliveries and merges that follow consult;
- the details Redis lacks of the user's items (never over a newer one, nor
  for an item removed since the fill began);
- the push messages and notifications addressed to the user, newest first,
  as many as an inbox keeps (pull messages and bulletins come in on read,
  by the merge, as for anyone);
- archived and snoozed items, then answers to actions;
- last the ``fill`` mark (no call checks it before); then, if a write of
  the user met the fill and may have missed it, the part goes again
  (``part_stale``) for the next read to fill.

Single flight: one fill per user at a time (the state hash's fill lock, with
a lease); a read that finds another fill running answers from PostgreSQL
(``messagecenter.fallback``) rather than wait. The drop comes before
PostgreSQL is read and every write after it only adds what is missing, so a
delivery racing with the fill is either read from PostgreSQL or kept. A
mark made while the user is not filled is committed in PostgreSQL and read
back by the user's next fill (``mark_applied``).
"""

import logging
import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from redis.exceptions import RedisError

from core import keys
from core import readmodel as core_readmodel
from core.bitmaps import bitmap_deserialize
from core.redis import get_redis
from durability import healing, outbox
from messagecenter import keys as mc_keys
from messagecenter import projection
from messagecenter.items import details_of_refs
from messagecenter.models import (
    InboxGroupEnd,
)
from messagecenter.readmodel import InboxEntry, grouping, publish, to_ms
from messagecenter.readmodel import read_state as read_state_rm
from messagecenter.readmodel import responses as responses_rm
from messagecenter.readmodel.inbox import months_hint_forget
from messagecenter.readmodel.scripts import WRITE_GRACE_MS, GroupRowExpired, fill_checked, idle_ms
from messagecenter.readmodel.user_part import (
    filled_users_forget,
    filled_users_scan,
    user_part_drop,
    user_part_fill_start,
    user_part_filled,
    user_part_own_put,
    user_part_write_begin,
    user_part_write_end,
    users_filled,
)
from messagecenter.user_rows import UserRows, user_items, user_rows

logger = logging.getLogger(__name__)

T = TypeVar("T")

# How long a fill may hold its user's lock: longer than any fill takes; a
# filler that dies frees the user when the lease runs out.
FILL_LEASE_MS = 30_000
# How long a mark made during a fill of its user waits for that fill to end
# before its Redis half is left to the outbox's periodic replay (a fill of the
# largest inbox takes well under that), and how often it looks.
FILL_WAIT_SECONDS = 5.0
FILL_POLL_SECONDS = 0.02


def inbox_served(user_id: int, read: Callable[[], T]) -> T:
    """``read`` (a user-facing read of this user's inbox in Redis), with the user's
    part of the read model filled first when it is missing. Raises
    ``healing.UserNotFilled`` (a RedisError: the caller answers from PostgreSQL)
    when another process is filling this user right now. A group whose row
    expired is re-formed the same way: the read answers ``GroupRowExpired``
    (a ``UserNotFilled``) and the user is filled again."""
    with fill_checked(user_id):
        try:
            return read()
        except healing.UserNotFilled:
            pass
    if not inbox_fill(user_id=user_id):
        raise healing.UserNotFilled(user_id)
    with fill_checked(user_id):
        return read()


def mark_applied(user_id: int, apply: Callable[[], object]) -> None:
    """Apply a committed mark's Redis half to this user's read model.

    Nothing to apply when the user is not filled and no fill runs: the next
    fill reads the committed mark from PostgreSQL. Nor when a group's row has
    expired: the user's part is dropped (filled at once with healing off). Raises
    ``healing.UserNotFilled`` while a fill of the user runs (it may have read
    PostgreSQL before the commit): the caller records the part stale
    (``part_stale``), which the fill applies once it is done.
    """
    try:
        with fill_checked(user_id):
            apply()
    except GroupRowExpired:
        # Nothing applied: the part goes (or, with healing off, is filled now)
        # and the next read fills it from PostgreSQL, the mark included.
        if not inbox_forget(user_ids=[user_id]) and fill_running(user_id):
            raise
    except healing.UserNotFilled:
        if fill_running(user_id):
            raise


# The outbox topic of a user's part that missed a committed write (payload {}).
STALE_TOPIC = "inbox.stale"


def part_stale(user_id: int) -> None:
    """A write of this user committed, but Redis could not take its half now
    (down, being rebuilt, or a fill of the user running that may have read
    PostgreSQL before the commit). What Redis holds of the user is stale from
    here: the outbox drops it once Redis answers (``part_stale_replay``), and
    the user's next read fills it from PostgreSQL, which has the write. One
    entry per write, never skipped because the user has one pending: that one
    may be dropping the part right now, before this write's commit."""
    outbox.enqueue_after_failure(topic=STALE_TOPIC, payload={}, user_id=user_id)


def part_stale_replay(payload: dict[str, Any], user_id: int | None) -> None:
    """Outbox handler of ``inbox.stale``: drop the user's part. A fill running
    now may have read PostgreSQL before the write, so this waits for it (and
    raises ``UserNotFilled``, a RedisError the replay retries, when it does
    not end in time); a fill that starts after this look read it after."""
    if user_id is None:
        raise ValueError("a stale part needs a user")
    if not fill_awaited(int(user_id)):
        raise healing.UserNotFilled(int(user_id))
    inbox_forget(user_ids=[int(user_id)])


OUTBOX_HANDLERS = {STALE_TOPIC: part_stale_replay}


def inbox_fill(*, user_id: int, now: datetime | None = None) -> bool:
    """Fill this user's part of the read model from PostgreSQL for the current
    generation; False when another process holds the user's fill."""
    state = mc_keys.inbox_state(user_id)
    token = secrets.token_hex(8)
    # The lock, the removal log's version and the names of the keys Redis holds
    # of the user: one round trip. A removal's Redis half follows its commit:
    # every removal up to this version is already out of what PostgreSQL answers below.
    start = user_part_fill_start(user_id=user_id, token=token, lease_ms=FILL_LEASE_MS)
    if start is None:
        return False
    now = now or timezone.now()
    cutoff = to_ms(now) - WRITE_GRACE_MS
    # The writes in flight when this read PostgreSQL may commit after it: their
    # notes stay (a dead writer's then has the user filled again). One past
    # its grace already belongs to a writer that died before this fill began,
    # whose commit, if any, this fill reads.
    writes = {token: at for token, at in start.writes.items() if at > cutoff}
    try:
        rows = user_rows(user_id)
        # Whatever Redis holds of the user goes (the keys of the groups
        # PostgreSQL knows ended included): a stale copy is never trusted.
        user_part_drop(user_id=user_id, group_keys=rows.ends, held=start)
        _restore(user_id, rows, now, since=start.removal_version)
        user_part_filled(
            user_id=user_id,
            generation=healing.user_generation(),
            idle_ms=idle_ms(),
            settled=start.removal_version,
            writes=writes,
        )
        months_hint_forget(user_id)
    finally:
        core_readmodel.cache_fill_unlock(key=state, token=token)
    if healing.user_generation():
        # A write that met this fill may have committed after it read PostgreSQL:
        # its outbox entry drops what was just filled, and the next read fills
        # again. (With healing off no write meets a fill, every user counting as
        # filled, and the entry's own replay fills this way.)
        outbox.settle_user(user_id=user_id)
    return True


@contextmanager
def part_writing(user_id: int) -> Iterator[None]:
    """Around a write of the user that commits in PostgreSQL and then changes
    the user's part in Redis (marks, archive, preferences, ...): the write is
    noted in the user's state hash before the block and the note goes after
    the block's commit and its Redis halves (``transaction.on_commit`` callbacks
    registered in the block run first). A process that dies between the
    commit and the Redis half leaves the note, and the user's first checked
    call after ``WRITE_GRACE_MS`` fills the part again from PostgreSQL. Nothing
    is noted with self-healing off (no call checks), nor when Redis refuses
    the note: the Redis half then fails too and records the part stale."""
    token = _write_begin(user_id) if healing.user_generation() else None
    try:
        yield
    except BaseException:
        if token is not None:
            _write_end(user_id, token)
        raise
    if token is not None:
        transaction.on_commit(lambda: _write_end(user_id, token))


def _write_begin(user_id: int) -> str | None:
    token = secrets.token_hex(6)
    try:
        user_part_write_begin(user_id=user_id, token=token, now_ms=to_ms(timezone.now()), idle_ms=idle_ms())
    except RedisError:
        return None
    return token


def _write_end(user_id: int, token: str) -> None:
    try:
        user_part_write_end(user_id=user_id, token=token)
    except RedisError:
        # The note stays: past its grace the user is filled again, which costs
        # a fill and loses nothing.
        logger.warning("redis unavailable; the write note of user %s stays", user_id)


@contextmanager
def _user_locked(user_id: int) -> Iterator[bool]:
    """Hold the user's fill lock (the state hash's fill lock: the user's slot) for the
    block; yields False, holding nothing, when another process holds it."""
    state = mc_keys.inbox_state(user_id)
    token = secrets.token_hex(8)
    if not core_readmodel.cache_fill_lock(key=state, token=token, lease_ms=FILL_LEASE_MS):
        yield False
        return
    try:
        yield True
    finally:
        core_readmodel.cache_fill_unlock(key=state, token=token)


def _drop(user_id: int) -> None:
    """Delete what Redis holds of the user's part (the group keys PostgreSQL knows included)."""
    group_keys = set(InboxGroupEnd.objects.filter(user_id=user_id).values_list("group_key", flat=True))
    user_part_drop(user_id=user_id, group_keys=group_keys)


def fill_running(user_id: int) -> bool:
    """Whether a fill of this user holds its lock now."""
    return bool(get_redis().exists(keys.fill_lock(mc_keys.inbox_state(user_id))))


def fill_awaited(user_id: int) -> bool:
    """Wait (at most FILL_WAIT_SECONDS) until no fill of this user runs; False on time-out."""
    deadline = time.monotonic() + FILL_WAIT_SECONDS
    while fill_running(user_id):
        if time.monotonic() >= deadline:
            return False
        time.sleep(FILL_POLL_SECONDS)
    return True


def inbox_idle_drop(*, batch: int = 500) -> int:
    """Drop what is left of the parts of users no longer filled (their state hash
    expired after MESSAGECENTER_USER_IDLE_SECONDS without a read, or Redis
    evicted it): the periodic job that keeps Redis to the users who come back.
    Each drop holds the user's fill lock, so it never runs beside a fill.
    Returns how many users' parts were dropped."""
    generation = healing.user_generation()
    if not generation:
        return 0  # healing off: every user counts as filled, none idles out
    dropped = 0
    cursor = 0
    while True:
        cursor, user_ids = filled_users_scan(cursor=cursor, count=batch)
        idle = sorted(set(user_ids) - users_filled(user_ids=user_ids, generation=generation))
        gone = [user_id for user_id in idle if _drop_unfilled(user_id, generation)]
        filled_users_forget(user_ids=gone)
        dropped += len(gone)
        if cursor == 0:
            return dropped


def _drop_unfilled(user_id: int, generation: str) -> bool:
    with _user_locked(user_id) as locked:
        # Not while a fill runs (the user is coming back), nor once filled again since the scan.
        if not locked or users_filled(user_ids=[user_id], generation=generation):
            return False
        _drop(user_id)
        return True


def inbox_forget(*, user_ids: list[int]) -> int:
    """Drop the parts Redis holds of these users, for a change their parts cannot
    follow in place: a grouped item removed (retracted, withdrawn), whose group
    re-forms from the items left. Each user's next read fills their part again
    from PostgreSQL. With healing off (no fill on read) they are filled here at
    once instead. Returns how many users' parts were dropped or filled."""
    generation = healing.user_generation()
    if not generation:
        return sum(1 for user_id in user_ids if inbox_fill(user_id=user_id))
    forgotten = 0
    for user_id in sorted(users_filled(user_ids=user_ids, generation=generation)):
        with _user_locked(user_id) as locked:
            # A fill running now read PostgreSQL after the change committed.
            if locked:
                _drop(user_id)
                forgotten += 1
    return forgotten


def inbox_forget_holding(*, group_key: str, member: str, batch: int = 500) -> int:
    """``inbox_forget`` for the users whose part holds ``member`` among their items
    of ``group_key``: an item for everyone names no recipients, so the users whose
    parts Redis holds are looked at (every user when healing is off: each counts
    as filled). Returns how many users' parts were dropped or filled."""
    forgotten = 0
    for user_ids in held_users(batch):
        holders = grouping.group_holds(group_key=group_key, member=member, user_ids=user_ids)
        if holders:
            forgotten += inbox_forget(user_ids=sorted(holders))
    return forgotten


def held_users(batch: int) -> Iterator[list[int]]:
    """The users whose part Redis may hold, a batch at a time."""
    if not healing.user_generation():
        users = get_user_model().objects.order_by("pk").values_list("pk", flat=True)
        last = 0
        while user_ids := [int(pk) for pk in users.filter(pk__gt=last)[:batch]]:
            yield user_ids
            last = user_ids[-1]
        return
    cursor = 0
    while True:
        cursor, user_ids = filled_users_scan(cursor=cursor, count=batch)
        if user_ids:
            yield user_ids
        if cursor == 0:
            return


def inbox_warm(*, user_ids: list[int]) -> int:
    """Fill these users now rather than on their first reads (an operator's
    warm-up after a loss); returns how many were filled here."""
    return sum(1 for user_id in user_ids if inbox_fill(user_id=user_id))


def _restore(user_id: int, rows: UserRows, now: datetime, *, since: int) -> None:
    now_ms = to_ms(now)
    _read_state_restore(user_id, rows)
    mutes = rows.mutes
    user_part_own_put(
        user_id=user_id,
        group_ids=rows.group_ids,
        mutes=mutes.dumps(),
        hidden=rows.hidden,
        ends=rows.ends,
    )
    # An inbox keeps the newest MESSAGECENTER_INBOX_MAX_ITEMS; parked items do not count.
    want = int(settings.MESSAGECENTER_INBOX_MAX_ITEMS) + len(rows.parked)
    # Oldest first, as they arrived (a grouped item joins the row of the items before it).
    items = user_items(user_id, now=now, want=want)
    entries = sorted(items.kept(mutes=mutes, hidden=set(rows.hidden)), key=lambda e: (e.score, e.ref))
    parked = projection.item_entries(rows.parked, now)
    _details_restore([*entries, *(e for e in parked.values() if e is not None)], since=since, now_ms=now_ms)
    publish.inbox_deliver_each(user_id=user_id, entries=entries, now_ms=now_ms)
    projection.item_places_put({user_id: rows.parked}, entries=parked)
    responses_rm.responses_put(user_id=user_id, responses=items.answers)


def _details_restore(entries: Sequence[InboxEntry], *, since: int, now_ms: int) -> None:
    """The details of the user's items that Redis lacks, from PostgreSQL. Item
    details are shared, but only the users who hold an item read its detail:
    after a loss they come back with the fills of the users who return (a
    HEXISTS per item when they are there already), not all at once with the
    rebuild. ``since``: the removal log's version the fill began at; an item
    removed after it keeps no detail."""
    by_ref = {entry.ref: entry for entry in entries}
    missing = publish.item_details_missing(list(by_ref))
    if not missing:
        return
    details = details_of_refs(missing)
    publish.item_details_add([(by_ref[ref], detail) for ref, detail in details.items()], since=since, now_ms=now_ms)


def _read_state_restore(user_id: int, rows: UserRows) -> None:
    """The user's committed read bit-sets and watermark, where Redis has none
    (SET NX, HSETNX: a mark already in Redis stays)."""
    state = read_state_rm.UserReadState()
    for month, (read, ever) in rows.months.items():
        state.months[month] = (bitmap_deserialize(read), bitmap_deserialize(ever))
    state.seen_ms = rows.seen_ms
    read_state_rm.read_state_restore(users={user_id: state})
