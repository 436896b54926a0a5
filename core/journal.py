"""The marks journal: every acknowledged mark, in PostgreSQL until a snapshot holds it.

Read marks live in Redis; the snapshot jobs copy them to PostgreSQL every
``MESSAGECENTER_SNAPSHOT_SECONDS``. Without more, a Redis that loses its data
(FLUSHALL, an empty restart, a failover to an empty replica) forgets every
mark since the last snapshot run. So each mark that went straight to Redis is
also ``record``-ed here: appended to a list in the process (a few
microseconds, no round trip on the mark's path) and written to
``MarkJournal`` by a thread every ``MESSAGECENTER_JOURNAL_FLUSH_SECONDS``
(one bulk INSERT per interval and process). Marks replayed from the outbox
are written here by the replay itself, in its transaction.

- The snapshot jobs ``compact`` the journal: rows written before the start
  of a run that drained its whole dirty set are in the snapshot rows it
  wrote (a row is written after its mark reached Redis and noted the dirty
  set; both times come from the database's clock).
- A rebuild ``replay``-s what is left, in order, on top of the restored
  snapshots, through the outbox's handlers (each sets a state, none toggles).
- Degraded reads lay a user's journal rows over the snapshot before the
  pending outbox marks (``core.outbox.pending_user_marks``).

The window: a process that dies loses the marks it had not flushed yet (at
most one interval); a Redis loss loses none that were flushed before the
rebuild read the journal (it waits one interval first).

Topics and payloads are the outbox's (``core.outbox``): the same handlers apply both.
"""

import atexit
import logging
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone

from core.models import MarkJournal

logger = logging.getLogger(__name__)

# Past this many unflushed marks (PostgreSQL down for long) the oldest are
# dropped, with an error logged: memory stays bounded.
MAX_BUFFERED = 200_000


@dataclass(frozen=True)
class Mark:
    """A mark as degraded reads and replays see it (journal row or pending outbox entry)."""

    topic: str
    payload: dict[str, Any]


# (user id, topic, payload, marked_at) not yet written, oldest first.
_Row = tuple[int, str, dict[str, Any], datetime]
_buffer: list[_Row] = []
# Rows taken out of the buffer by a flush whose INSERT has not committed yet:
# still this process's to show (a degraded read between the two would see
# the mark in neither place and answer as if it had not been made).
_writing: list[_Row] = []
_lock = threading.Lock()
_flusher: dict[str, Any] = {"thread": None, "pid": 0}


def flush_seconds() -> float:
    return float(getattr(settings, "MESSAGECENTER_JOURNAL_FLUSH_SECONDS", 1.0))


def record(*, topic: str, payload: dict[str, Any], user_id: int) -> None:
    """Note a mark that Redis has just taken (call after the Redis write succeeded)."""
    row = (int(user_id), topic, payload, timezone.now())
    if flush_seconds() <= 0:
        _write([row])
        return
    with _lock:
        _buffer.append(row)
        if len(_buffer) > MAX_BUFFERED:
            del _buffer[: len(_buffer) - MAX_BUFFERED]
            logger.error("marks journal buffer full: dropped the oldest unflushed marks")
        _ensure_flusher()


def _ensure_flusher() -> None:
    # Called with _lock held. One thread per process, started on demand (after a
    # fork the parent's thread is gone: the pid tells) and ended when idle, so
    # an idle process holds no thread and no database connection for it.
    thread = _flusher["thread"]
    if thread is not None and thread.is_alive() and _flusher["pid"] == os.getpid():
        return
    thread = threading.Thread(target=_flush_loop, name="marks-journal", daemon=True)
    _flusher["thread"], _flusher["pid"] = thread, os.getpid()
    thread.start()


def _flush_loop() -> None:
    try:
        while True:
            time.sleep(flush_seconds())
            flush()
            with _lock:
                if not _buffer:
                    _flusher["thread"] = None
                    return
    finally:
        connection.close()  # this thread's own connection


def _write(rows: list[_Row]) -> None:
    MarkJournal.objects.bulk_create(
        [
            MarkJournal(user_id=user_id, topic=topic, payload=payload, marked_at=marked_at)
            for user_id, topic, payload, marked_at in rows
        ]
    )


def flush() -> int:
    """Write the process's buffered marks now; returns how many. On a database
    error they go back to the front of the buffer for the next try."""
    with _lock:
        rows = _buffer[:]
        del _buffer[:]
        _writing.extend(rows)
    if not rows:
        return 0
    try:
        _write(rows)
    except DatabaseError:
        logger.warning("marks journal not written (%d marks kept for the next try)", len(rows), exc_info=True)
        with _lock:
            _forget_writing(rows)
            _buffer[:0] = rows
        return 0
    with _lock:
        _forget_writing(rows)
    return len(rows)


def _forget_writing(rows: list[_Row]) -> None:
    # Called with _lock held; by identity, as equal marks may be in flight twice.
    written = {id(row) for row in rows}
    _writing[:] = [row for row in _writing if id(row) not in written]


atexit.register(flush)


def unflushed_count() -> int:
    return len(_buffer)


def unflushed_user_marks(*, user_id: int, topics: Iterable[str]) -> list[Mark]:
    """The user's marks of these topics that this process has not written yet, oldest first."""
    wanted = set(topics)
    with _lock:
        # Rows being written are older than the buffered ones. One may also be
        # in the journal's table already (committed, not yet forgotten here):
        # a mark sets a value, so seeing it twice in order changes nothing.
        local = [row for row in (*_writing, *_buffer) if row[0] == user_id and row[1] in wanted]
    return [Mark(topic, payload) for _, topic, payload, _ in local]


def database_now() -> datetime:
    """The database's clock (what ``MarkJournal.created_at`` is written with)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT clock_timestamp()")
            row = cursor.fetchone()
        return row[0] if isinstance(row[0], datetime) else timezone.now()
    # SQLite: Now() writes UTC to the millisecond from its own reading of the
    # clock, which can land a millisecond off ours: floored, and one
    # millisecond earlier, so a row written as a run starts is never taken
    # for one written before it (compacting one interval later is harmless).
    now = datetime.now(tz=UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000) - timedelta(milliseconds=1)


def compact(*, topics: Iterable[str], before: datetime) -> int:
    """Forget marks of these topics written before ``before`` (database clock: a
    snapshot run that started then holds them); returns how many."""
    deleted, _ = MarkJournal.objects.filter(topic__in=list(topics), created_at__lt=before).delete()
    return int(deleted)
