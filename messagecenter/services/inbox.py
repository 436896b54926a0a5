"""The signed-in user's inbox (writes), and the delivery entry points every
item source (messages, bulletins, later subscription notifications) uses."""

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone
from pyroaring import BitMap
from redis.exceptions import RedisError

from core import healing, journal, outbox
from core.exceptions import NotFound, ValidationFailed
from messagecenter import fallback, read_events
from messagecenter.models import CATEGORIES, InboxHidden, InboxItemState
from messagecenter.readmodel import InboxEntry, inbox, publish, to_ms
from messagecenter.selectors import muted_among
from messagecenter.services.grouping import group_row_deleted, group_row_read, groups_all_read

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
    Returns how many inboxes gained the item.
    """
    if detail is not None:
        publish.item_detail_put(ref=entry.ref, detail=detail)
    wanted = [int(u) for u in user_ids]
    muted = muted_among(user_ids=wanted, category=entry.category, time_ms=entry.score)
    if muted:
        wanted = [u for u in wanted if u not in muted]
    return publish.inbox_deliver(entry=entry, user_ids=wanted, now_ms=_now_ms(now))


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
# Each mark goes straight to Redis, unless Redis is down or the user still has
# marks waiting in the outbox (a new mark must not overtake them). Then
# PostgreSQL decides whether the item is live for the user
# (``messagecenter.fallback``), the mark is stored in the outbox (topics and
# payloads are a contract with the fallback, which lays pending marks over the
# read-state snapshot) and the answer is the one the Redis path would give.
# ``core.outbox.replay`` applies the entries through the same Redis calls.
# A mark that went straight to Redis is noted in the marks journal
# (``core.journal``): a Redis that loses its data before the next read-state
# snapshot gets it back from there. (Hides need no note: their row is the record.)


def _direct(user_id: int) -> bool:
    """May this mark go straight to Redis? (False: queue it behind the older ones.)"""
    return outbox.settle_user(user_id=user_id)


def _set_read(*, user: AbstractBaseUser, item_id: str, read: bool, now: datetime | None) -> bool:
    ref = _ref(item_id)
    now = now or timezone.now()
    user_id = int(user.pk)
    try:
        if _direct(user_id):
            if not inbox.inbox_set_read(user_id=user_id, ref=ref, read=read, now_ms=to_ms(now)):
                healing.confirm_ready()  # not a 404 from a Redis that lost its data a moment ago
                raise NotFound("No such item in your inbox.")
            journal.record(
                topic=fallback.TOPIC_READ, payload={"ref": ref, "read": read, "at_ms": to_ms(now)}, user_id=user_id
            )
            if read:
                group_row_read(user_id=user_id, ref=ref)
            return True
    except RedisError:
        logger.warning("redis unavailable; queueing an inbox mark of user %s", user_id)
    if not fallback.inbox_item_live(user_id=user_id, ref=ref, now=now):
        raise NotFound("No such item in your inbox.")
    outbox.enqueue(topic=fallback.TOPIC_READ, payload={"ref": ref, "read": read, "at_ms": to_ms(now)}, user_id=user_id)
    return True


def inbox_mark_read(*, user: AbstractBaseUser, item_id: str, now: datetime | None = None) -> bool:
    """Mark read; raises NotFound unless the item is live in this user's inbox."""
    return _set_read(user=user, item_id=item_id, read=True, now=now)


def inbox_mark_unread(*, user: AbstractBaseUser, item_id: str, now: datetime | None = None) -> bool:
    return _set_read(user=user, item_id=item_id, read=False, now=now)


def inbox_mark_all_read(*, user: AbstractBaseUser, category: str | None = None, now: datetime | None = None) -> int:
    """One Lua call marks every live unread item (of the category) read; returns how many.

    Without Redis the count is what PostgreSQL (snapshot plus pending marks) says was unread.
    """
    if category is not None and category not in CATEGORIES:
        raise ValidationFailed(
            f"Unknown category {category!r}.",
            code="invalid_category",
            fields={"category": [f"Choose from {', '.join(CATEGORIES)}."]},
        )
    now = now or timezone.now()
    user_id = int(user.pk)
    try:
        if _direct(user_id):
            marked = inbox.inbox_read_all(user_id=user_id, category=category, now_ms=to_ms(now))
            journal.record(
                topic=fallback.TOPIC_READ_ALL,
                payload={"category": category or "", "at_ms": to_ms(now)},
                user_id=user_id,
            )
            groups_all_read(user_id=user_id, category=category)
            return marked
    except RedisError:
        logger.warning("redis unavailable; queueing mark-all-read of user %s", user_id)
    marked = len(fallback.inbox_unread_refs(user_id=user_id, category=category, now=now))
    outbox.enqueue(
        topic=fallback.TOPIC_READ_ALL, payload={"category": category or "", "at_ms": to_ms(now)}, user_id=user_id
    )
    return marked


def inbox_mark_seen(*, user: AbstractBaseUser, now: datetime | None = None) -> None:
    """Move the unseen watermark: unseen_count is 0 until something newer arrives."""
    now_ms = _now_ms(now)
    user_id = int(user.pk)
    try:
        if _direct(user_id):
            inbox.inbox_seen(user_id=user_id, now_ms=now_ms)
            journal.record(topic=fallback.TOPIC_SEEN, payload={"at_ms": now_ms}, user_id=user_id)
            return
    except RedisError:
        logger.warning("redis unavailable; queueing the seen mark of user %s", user_id)
    outbox.enqueue(topic=fallback.TOPIC_SEEN, payload={"at_ms": now_ms}, user_id=user_id)


def inbox_hide(*, user: AbstractBaseUser, item_id: str, now: datetime | None = None) -> bool:
    """Delete an item from this user's inbox only.

    PostgreSQL keeps a row per hide (a user's own action, so cheap) so a
    rebuild of Redis keeps it hidden; Redis follows after commit, or the
    outbox entry written in the same transaction as the row replays it.
    """
    ref = _ref(item_id)
    now = now or timezone.now()
    now_ms = to_ms(now)
    user_id = int(user.pk)
    direct = False
    try:
        direct = _direct(user_id)
        # Archived and snoozed items are in the inbox too.
        live = inbox.inbox_place(user_id=user_id, ref=ref, now_ms=now_ms) is not None if direct else False
        if direct and not live:
            healing.confirm_ready()  # not a 404 from a Redis that lost its data a moment ago
    except RedisError:
        logger.warning("redis unavailable; queueing a hide of user %s", user_id)
        direct = False
    if not direct:
        live = ref in fallback.inbox_places(user_id=user_id, refs=[ref], now=now)
    if not live:
        raise NotFound("No such item in your inbox.")
    payload = {"ref": ref, "at_ms": now_ms}
    with transaction.atomic():
        InboxHidden.objects.get_or_create(user_id=user_id, item_id=ref)
        InboxItemState.objects.filter(user_id=user_id, item_id=ref).delete()  # deleted wherever it was
        if direct:
            transaction.on_commit(lambda: _hide_after_commit(user_id=user_id, payload=payload))
        else:
            outbox.enqueue(topic=fallback.TOPIC_HIDE, payload=payload, user_id=user_id)
    return True


def _hide_after_commit(*, user_id: int, payload: dict[str, Any]) -> None:
    try:
        inbox.inbox_hide(user_id=user_id, ref=payload["ref"], now_ms=payload["at_ms"])
        group_row_deleted(user_id=user_id, ref=payload["ref"], now_ms=payload["at_ms"])
    except RedisError:
        # The row is committed: Redis must follow it later, not lose it.
        outbox.enqueue_after_failure(topic=fallback.TOPIC_HIDE, payload=payload, user_id=user_id)


# --- Outbox handlers (idempotent: each sets a state, none toggles) -----------------


def _user(user_id: int | None) -> int:
    if user_id is None:
        raise ValueError("an inbox mark needs a user")
    return int(user_id)


def replay_read(payload: dict[str, Any], user_id: int | None) -> None:
    # An item gone since (expired, withdrawn) makes this a no-op, as the mark would have been.
    inbox.inbox_set_read(
        user_id=_user(user_id), ref=str(payload["ref"]), read=bool(payload["read"]), now_ms=int(payload["at_ms"])
    )


def replay_read_all(payload: dict[str, Any], user_id: int | None) -> None:
    # Only what the user saw as unread then (the fallback's contract): items
    # delivered between the mark and this replay stay unread.
    at_ms = int(payload["at_ms"])
    inbox.inbox_read_all(
        user_id=_user(user_id), category=str(payload["category"]) or None, now_ms=at_ms, max_score=at_ms
    )


def replay_seen(payload: dict[str, Any], user_id: int | None) -> None:
    inbox.inbox_seen(user_id=_user(user_id), now_ms=int(payload["at_ms"]))


def replay_hide(payload: dict[str, Any], user_id: int | None) -> None:
    inbox.inbox_hide(user_id=_user(user_id), ref=str(payload["ref"]), now_ms=int(payload["at_ms"]))


OUTBOX_HANDLERS = {
    fallback.TOPIC_READ: replay_read,
    fallback.TOPIC_READ_ALL: replay_read_all,
    fallback.TOPIC_SEEN: replay_seen,
    fallback.TOPIC_HIDE: replay_hide,
}


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
