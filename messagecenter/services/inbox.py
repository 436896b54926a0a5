"""The signed-in user's inbox (writes), and the delivery entry points every
item source (messages, bulletins, later subscription notifications) uses."""

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone
from pyroaring import BitMap
from redis.exceptions import RedisError

from core.api.errors import NotFound, ValidationFailed
from durability import healing, outbox
from messagecenter import fallback, read_events
from messagecenter.fill import fill_awaited, inbox_served, mark_applied, part_stale, part_writing
from messagecenter.models import CATEGORIES, InboxHidden, InboxItemState
from messagecenter.readmodel import InboxEntry, inbox, publish, to_ms
from messagecenter.selectors import muted_among
from messagecenter.services.grouping import group_row_deleted, group_row_read, groups_all_read
from messagecenter.services.read_state import read_marks_commit, seen_commit

logger = logging.getLogger(__name__)

MAX_ITEM_ID_LENGTH = 40


def _now_ms(now: datetime | None) -> int:
    return to_ms(now or timezone.now())


def _ref(item_id: str) -> str:
    # Opaque ids: anything malformed is simply not in the inbox.
    if not item_id or len(item_id) > MAX_ITEM_ID_LENGTH or "|" in item_id:
        raise NotFound("No such item in your inbox.")
    return item_id


def inbox_deliver(
    *, entry: InboxEntry, user_ids: Iterable[int], detail: Mapping[str, Any] | None = None, now: datetime | None = None
) -> int:
    """Push one item into these users' inboxes (write fan-out).

    The entry point for any item source: give the item's ``InboxEntry``
    (ref ``<kind letter><id>``, category, bitmap slot from ``slot_allocate``,
    score, expiry) and, once, its ``detail`` (title, summary, body_html,
    images, link). Idempotent; hidden refs stay hidden, and users who muted
    the item's category at its time are skipped (``messagecenter.mutes``).
    With healing on only the users whose part Redis holds are written: the
    others' fills read the item from the recipient rows the caller committed
    first. Returns how many inboxes gained the item.
    """
    if detail is not None:
        publish.item_detail_put(ref=entry.ref, detail=detail)
    wanted = [int(u) for u in user_ids]
    muted = muted_among(user_ids=wanted, category=entry.category, time_ms=entry.score)
    if muted:
        wanted = [u for u in wanted if u not in muted]
    return publish.inbox_deliver(entry=entry, user_ids=wanted, now_ms=_now_ms(now), held_only=healing.enabled())


def inbox_publish_pull(
    *, entry: InboxEntry, detail: Mapping[str, Any], audience: BitMap | None, announce: tuple[str, str] = ("", "")
) -> int:
    """Store an item once for users to merge on read (pull fan-out).

    ``audience`` None means everyone (including users created later);
    otherwise the send-time set of user ids. ``announce``: the live
    broadcast to publish with the registration. Returns the pull sequence
    number (0 when it was registered already: nobody is told again).
    """
    return publish.pull_register(entry=entry, detail=detail, audience=audience, announce=announce)


# --- The user's marks ----------------------------------------------------------
#
# PostgreSQL first: a mark is checked against the inbox (Redis when it answers,
# else PostgreSQL: ``messagecenter.fallback``), committed to the user's read
# state (``messagecenter.services.read_state``), and only then applied to Redis
# (``transaction.on_commit``). When Redis cannot take it then (down, being
# rebuilt, a fill of the user running), the user's part is recorded stale in
# the outbox (``fill.part_stale``): dropped once Redis answers, and filled
# from PostgreSQL, which has the mark, on the user's next read. Reads that
# fall back to PostgreSQL meanwhile see the committed state.


def _direct(user_id: int) -> bool:
    """May a write go straight to Redis? (False: the user's part waits to be dropped.)"""
    return outbox.settle_user(user_id=user_id)


def _placed(user_id: int, ref: str, now: datetime) -> tuple[str, InboxEntry] | None:
    """Where ``ref`` is in this user's inbox (live, archived, snoozed) with its entry,
    else None: Redis when it answers (a miss is checked against a rebuild), else PostgreSQL."""
    try:
        healing.require_ready()
        placed = inbox_served(user_id, lambda: inbox.inbox_place(user_id=user_id, ref=ref, now_ms=to_ms(now)))
        if placed is None:
            healing.confirm_ready()  # not a miss from a Redis that lost its data a moment ago
            return None
        detail = placed.row.detail
        entry = InboxEntry.from_member(
            str(detail["member"]), score=placed.row.score, group_key=str(detail.get("group_key", ""))
        )
        return placed.place, entry
    except RedisError:
        logger.warning("redis unavailable; inbox place of user %s from PostgreSQL", user_id)
    return fallback.inbox_place(user_id=user_id, ref=ref, now=now)


def redis_after_commit(*, user_id: int, apply: Callable[[], object]) -> None:
    """Once the transaction commits, run ``apply`` (the write's Redis half) on the
    user's part, or record the part stale when Redis cannot take it now."""

    def after() -> None:
        try:
            # The user's older writes that missed Redis drop the part first.
            if _direct(user_id):
                mark_applied(user_id, apply)
                return
        except healing.ReadModelNotReady:
            pass  # behind a rebuild or a fill of the user
        except RedisError:
            logger.warning("redis unavailable; the inbox part of user %s waits to be dropped", user_id)
            part_stale(user_id)
            return
        # Behind a rebuild, a fill of the user, or the user's entries another replay holds.
        part_stale(user_id)
        _settle_soon(user_id)

    transaction.on_commit(after)


def _settle_soon(user_id: int) -> None:
    """The user's part waits to be dropped behind a rebuild or a fill of the
    user. Both settle the outbox when they end, but the one ending may not see
    an entry committed a moment before: the rebuild's last replay can run
    before this process notices it ended (``durability.healing`` answers from
    a look up to a second old), and a fill in another process may trust that
    process's memory of an empty outbox (``durability.outbox``). The user
    would see the mark undone until the periodic replay. So the marking
    request looks again: once the rebuild is over and no fill of the user runs
    (waiting a little for one), it settles the user's entries itself, and the
    user reads their own mark next. Both sides write before they look, so one
    of them sees the other."""
    try:
        if healing.check(fresh=True) and fill_awaited(user_id):
            outbox.settle_user(user_id=user_id)
    except RedisError:
        logger.warning("redis unavailable; the inbox part of user %s waits for the outbox's replay", user_id)


def _set_read(*, user: AbstractBaseUser, item_id: str, read: bool, now: datetime | None) -> bool:
    ref = _ref(item_id)
    now = now or timezone.now()
    user_id = int(user.pk)
    placed = _placed(user_id, ref, now)
    if placed is None or placed[0] == inbox.SNOOZED:  # a snoozed item is away until it wakes
        raise NotFound("No such item in your inbox.")
    entry = placed[1]
    now_ms = to_ms(now)
    with part_writing(user_id):
        # Committed before the hooks below are registered, so they run at once, after it.
        read_marks_commit(user_id=user_id, entries=[entry], read=read, now=now)
        # The member lets the Redis half take the one-round-trip path.
        redis_after_commit(
            user_id=user_id,
            apply=lambda: inbox.inbox_set_read(user_id=user_id, ref=ref, read=read, now_ms=now_ms, member=entry.member),
        )
        # Reading a grouped row ends its group (once Redis has the mark); a row
        # is its group's newest item, so an item without a key ends none.
        if read and entry.group_key:
            transaction.on_commit(lambda: group_row_read(user_id=user_id, ref=ref))
    return True


def inbox_mark_read(*, user: AbstractBaseUser, item_id: str, now: datetime | None = None) -> bool:
    """Mark read; raises NotFound unless the item is live in this user's inbox."""
    return _set_read(user=user, item_id=item_id, read=True, now=now)


def inbox_mark_unread(*, user: AbstractBaseUser, item_id: str, now: datetime | None = None) -> bool:
    return _set_read(user=user, item_id=item_id, read=False, now=now)


def _unread(user_id: int, category: str | None, now: datetime) -> list[InboxEntry]:
    """The live unread items (of the category) placed by ``now``: Redis when it answers, else PostgreSQL."""
    try:
        healing.require_ready()
        members = inbox_served(
            user_id, lambda: inbox.inbox_unread_members(user_id=user_id, category=category, now_ms=to_ms(now))
        )
        return [InboxEntry.from_member(member) for member in members]
    except RedisError:
        logger.warning("redis unavailable; unread items of user %s from PostgreSQL", user_id)
    return fallback.inbox_unread_entries(user_id=user_id, category=category, now=now)


def inbox_mark_all_read(*, user: AbstractBaseUser, category: str | None = None, now: datetime | None = None) -> int:
    """Mark every live unread item (of the category) read; returns how many.

    The items' bits are committed in their month rows; Redis then marks the
    items placed by then (``max_score``), so an item arriving meanwhile stays unread.
    """
    if category is not None and category not in CATEGORIES:
        raise ValidationFailed(
            f"Unknown category {category!r}.",
            code="invalid_category",
            fields={"category": [f"Choose from {', '.join(CATEGORIES)}."]},
        )
    now = now or timezone.now()
    user_id = int(user.pk)
    unread = _unread(user_id, category, now)
    if unread:
        now_ms = to_ms(now)
        with part_writing(user_id):
            # Committed before its hooks are registered, so they run at once, after it.
            read_marks_commit(user_id=user_id, entries=unread, read=True, now=now)
            # Only the items placed by now (``max_score``): one arriving meanwhile stays unread.
            redis_after_commit(
                user_id=user_id,
                apply=lambda: inbox.inbox_read_all(user_id=user_id, category=category, now_ms=now_ms, max_score=now_ms),
            )
            transaction.on_commit(lambda: groups_all_read(user_id=user_id, category=category))
    return len(unread)


def inbox_mark_seen(*, user: AbstractBaseUser, now: datetime | None = None) -> None:
    """Move the unseen watermark: unseen_count is 0 until something newer arrives."""
    now = now or timezone.now()
    user_id = int(user.pk)
    now_ms = to_ms(now)
    with part_writing(user_id), transaction.atomic():
        seen_commit(user_id=user_id, seen_ms=now_ms, now=now)
        redis_after_commit(user_id=user_id, apply=lambda: inbox.inbox_seen(user_id=user_id, now_ms=now_ms))


def inbox_hide(*, user: AbstractBaseUser, item_id: str, now: datetime | None = None) -> bool:
    """Delete an item from this user's inbox only.

    PostgreSQL keeps a row per hide (a user's own action, so cheap), committed
    before the answer, so a fill of the user keeps it hidden; Redis follows
    after commit (or the user's part is recorded stale).
    """
    ref = _ref(item_id)
    now = now or timezone.now()
    user_id = int(user.pk)
    if _placed(user_id, ref, now) is None:  # archived and snoozed items are in the inbox too
        raise NotFound("No such item in your inbox.")
    now_ms = to_ms(now)
    with part_writing(user_id), transaction.atomic():
        InboxHidden.objects.get_or_create(user_id=user_id, item_id=ref)
        InboxItemState.objects.filter(user_id=user_id, item_id=ref).delete()  # deleted wherever it was
        redis_after_commit(user_id=user_id, apply=lambda: inbox.inbox_hide(user_id=user_id, ref=ref, now_ms=now_ms))
        # Deleting a grouped row deletes its group (after the row's own hide).
        transaction.on_commit(lambda: group_row_deleted(user_id=user_id, ref=ref))
    return True


REMOVED_KEEP_DEFAULT = 100_000


def inbox_removed_trim(*, keep: int | None = None) -> int:
    """Bound the global removal list (a periodic task); returns entries dropped.

    Users who had not settled past the dropped entries re-check their whole
    inbox against the item details on their next read, so nothing is missed.
    """
    if keep is None:
        keep = int(getattr(settings, "MESSAGECENTER_REMOVED_KEEP", REMOVED_KEEP_DEFAULT))
    return publish.removed_trim(keep=keep)


def inbox_first_reads_fold() -> int:
    """Fold the pending first reads into the per-item hourly counters (a periodic
    task keeps the list short; the admin chart folds before it reads), with
    their ``message.read`` events."""
    return read_events.first_reads_fold()
