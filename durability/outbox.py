"""The outbox: read-model writes that could not reach Redis, kept in PostgreSQL.

PostgreSQL commits first and Redis follows. When Redis is unreachable at that
moment the write is recorded here (``enqueue``) instead of being lost, and
``replay`` applies it once Redis answers again: in id order, each entry
deleted only after its handler succeeded, so a replay that dies half-way is
simply run again (every handler is idempotent: it re-reads PostgreSQL or
sets a bit to a given value).

Three kinds of entries:

- projections of committed data that Redis refused at commit
  (``notices.platform_sync``, ``messagecenter.mirror``; see ``durability.projection``),
  with no user;
- projections a transaction asked for, written inside it and deleted by its
  process once they ran (``durability.unrun``, due only after a grace): what
  is left was lost with a process that died between its commit and its runs;
- what a user's write that missed Redis leaves for it, with ``user_id`` set:
  ``inbox.stale`` (the user's cached part of the inbox is dropped, to be
  filled again from PostgreSQL) and ``notices.read`` (an announcement mark,
  whose bits live in keys every reader of the platform shares). The write
  itself is committed in PostgreSQL before it is acknowledged (degraded
  reads and the fills read it there); the entry only brings Redis up to date.

Replay waits while the read model is being rebuilt (``durability.healing``): the
rebuild restores the committed state itself.

Replay runs from Celery beat (``core.outbox_replay`` every
``MESSAGECENTER_OUTBOX_REPLAY_SECONDS``) and at the end of a rebuild. Requests do not replay when the
circuit breaker closes again: a request would pay for everybody's backlog. The
one exception is a write of a user who still has pending entries
(``settle_user``): it must not overtake them, so that request replays the
user's own first (or queues behind them).

Handlers are named per topic by the app that owns the write (a mapping its
AppConfig names as ``outbox_handlers``; ``core.contributions``).
"""

import logging
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.utils import timezone
from redis.exceptions import RedisError

from core.contributions import contributed_by_name
from durability import healing
from durability.models import OutboxEntry

logger = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any], int | None], None]

# An entry whose handler keeps raising something other than a RedisError (a
# bug, or data the handler cannot apply) is parked after this many attempts:
# kept for an operator to look at, skipped by every later replay.
POISON_ATTEMPTS = 5
PARKED_PREFIX = "parked: "
BATCH_SIZE = 100


def handlers() -> dict[str, Handler]:
    """Every app's handlers by topic (their AppConfig's ``outbox_handlers``)."""
    return contributed_by_name("outbox_handlers")


# --- Is there anything pending? (process-local, cheap) -----------------------
#
# Every user write asks "does this user have pending entries?" before writing
# Redis. Asking PostgreSQL on every write would add a query to the hot write
# path for a state that is almost always "no". So each process remembers two
# things: that it enqueued something itself (then it asks, until a look finds
# nothing pending), and, for a couple of seconds, that a query found no
# pending user entries at all. Another process's enqueue can go unnoticed for
# at most that long. An inbox write enqueues only while Redis fails, and this
# process then fails on the same Redis too (and queues behind it); an
# announcement mark enqueues always but applies its own entry at once; so the
# window only matters while Redis flaps.
EMPTY_CACHE_SECONDS = 2.0
_local: dict[str, float | bool] = {"enqueued": False, "empty_until": 0.0}


def _pending() -> Any:
    return OutboxEntry.objects.exclude(last_error__startswith=PARKED_PREFIX)


def _may_have_user_entries() -> bool:
    if known_settled():
        return False
    if _pending().filter(user_id__isnull=False).exists():
        return True
    _local["enqueued"] = False
    _local["empty_until"] = time.monotonic() + EMPTY_CACHE_SECONDS
    return False


def known_settled() -> bool:
    """Whether this process knows, without asking PostgreSQL, that no user's
    write waits in the outbox (its last look found none, recently, and it has
    queued none since): a mark may then go straight to Redis. False when
    ``settle_user`` would have to look."""
    return not _local["enqueued"] and time.monotonic() < float(_local["empty_until"])


def forget_local_state() -> None:
    """Drop the process's memory of the outbox (tests that edit rows directly)."""
    _local["enqueued"] = False
    _local["empty_until"] = 0.0


# --- Writing -------------------------------------------------------------------


def enqueue(
    *, topic: str, payload: dict[str, Any], user_id: int | None = None, due_at: datetime | None = None
) -> OutboxEntry:
    """Record a write for Redis that must not be lost (``due_at``: not replayed before).

    Called from ``on_commit`` callbacks (autocommit: the insert is its own
    transaction) and from services inside their transactions.
    """
    if topic not in handlers():
        # A typo here would only show at replay time, long after the request.
        raise ValueError(f"No outbox handler registered for topic {topic!r}.")
    entry = OutboxEntry.objects.create(topic=topic, payload=payload, user_id=user_id, due_at=due_at)
    _local["enqueued"] = True
    return entry


def payload_replace(pk: int, payload: dict[str, Any]) -> None:
    """Give a pending entry a new payload (its writer learned more before its commit)."""
    OutboxEntry.objects.filter(pk=pk).update(payload=payload)


def discard(pk: int) -> None:
    """Delete one entry its writer no longer needs: one statement (a queryset's
    delete wraps its own in a transaction, two round trips more)."""
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {OutboxEntry._meta.db_table} WHERE id = %s", [pk])  # noqa: S608 (our own name)


def enqueue_after_failure(*, topic: str, payload: dict[str, Any], user_id: int | None = None) -> None:
    """``enqueue`` for after-commit callbacks: if PostgreSQL fails too, log it
    rather than break the request that already committed (the periodic
    rebuilds and ``check_redis`` restore the read model)."""
    try:
        enqueue(topic=topic, payload=payload, user_id=user_id)
    except DatabaseError:
        logger.exception("could not record outbox entry %s %r", topic, payload)


# --- Reading ---------------------------------------------------------------------


def pending_user_marks(*, user_id: int, topics: Iterable[str]) -> list[OutboxEntry]:
    """The user's pending entries of these topics, oldest first."""
    return list(_pending().filter(user_id=user_id, topic__in=list(topics)).order_by("id"))


def pending_count() -> int:
    return int(_pending().count())


def user_has_pending(*, user_id: int) -> bool:
    return bool(_pending().filter(user_id=user_id).exists())


# --- Replaying -------------------------------------------------------------------


def _lock_batch(size: int, failed: set[int], user_id: int | None) -> list[OutboxEntry] | None:
    """The next entries to apply (of the user, when given), locked; None when
    another replay holds older ones.

    ``skip_locked`` keeps two replays from applying one entry at once. Alone it
    would let the second replay jump ahead to later entries; so a replay only
    proceeds when the oldest pending entry is in its own batch.
    """
    queryset = _pending().exclude(pk__in=failed).exclude(due_at__gt=timezone.now()).order_by("id")
    if user_id is not None:
        queryset = queryset.filter(user_id=user_id)
    if not connection.features.has_select_for_update_skip_locked:
        return list(queryset[:size])  # SQLite: one writer at a time anyway
    batch = list(queryset.select_for_update(skip_locked=True)[:size])
    oldest = queryset.values_list("pk", flat=True).first()
    if batch and oldest is not None and batch[0].pk != oldest:
        return None
    return batch


def _record_failure(entry: OutboxEntry, exc: Exception, *, poison: bool) -> None:
    entry.attempts += 1
    message = f"{type(exc).__name__}: {exc}"[:2000]
    if poison and entry.attempts >= POISON_ATTEMPTS:
        message = PARKED_PREFIX + message
        logger.error("outbox entry #%s (%s) parked after %s attempts: %s", entry.pk, entry.topic, entry.attempts, exc)
    entry.last_error = message
    entry.save(update_fields=["attempts", "last_error"])


def replay(*, limit: int = 500, while_rebuilding: bool = False, user_id: int | None = None) -> int:
    """Apply up to ``limit`` pending entries (``user_id``: that user's only) in
    id order; returns how many were applied.

    Does nothing while the read model is lost or being rebuilt (the rebuild
    replays at its end, ``while_rebuilding``).

    Stops at the first RedisError (Redis is still down: later entries must not
    overtake that one). An entry whose handler raises anything else is kept
    with its error and skipped for the rest of this run; after
    ``POISON_ATTEMPTS`` runs it is parked, so one bad entry cannot hold the
    rest back for ever.
    """
    if not while_rebuilding:
        try:
            if not healing.check(fresh=True):
                return 0
        except RedisError:
            return 0  # Redis is down: nothing can be applied now
    applied = 0
    failed: set[int] = set()
    while applied < limit:
        with transaction.atomic():
            batch = _lock_batch(min(BATCH_SIZE, limit - applied), failed, user_id)
            if not batch:
                return applied
            for entry in batch:
                handler = handlers().get(entry.topic)
                try:
                    if handler is None:
                        raise LookupError(f"no handler for topic {entry.topic!r}")
                    # A savepoint: a handler's failed query must not break the batch's transaction.
                    with transaction.atomic():
                        handler(entry.payload, entry.user_id)
                except RedisError as exc:
                    logger.warning("outbox replay stopped at #%s: redis unavailable (%s)", entry.pk, exc)
                    _record_failure(entry, exc, poison=False)
                    return applied
                except Exception as exc:
                    logger.exception("outbox entry #%s (%s) failed", entry.pk, entry.topic)
                    _record_failure(entry, exc, poison=True)
                    failed.add(entry.pk)
                    continue
                entry.delete()
                applied += 1
    return applied


def settle_user(*, user_id: int) -> bool:
    """Before a user's write goes straight to Redis: True when none of the
    user's entries is pending.

    If some are, replay them first (they are older than the write about to be
    made), the user's only: a request pays for its own user's backlog, never
    for everybody's. False means they are still pending (Redis failed again,
    or another replay holds them) and the caller must record its write behind
    them. Raises
    ``healing.ReadModelNotReady`` (a RedisError) while the read model is lost
    or being rebuilt: the caller queues the mark as when Redis is down.
    """
    healing.require_ready()
    if not _may_have_user_entries() or not user_has_pending(user_id=user_id):
        return True
    replay(user_id=user_id)
    return not user_has_pending(user_id=user_id)
