"""The inbox read state in PostgreSQL: committed before a mark is acknowledged.

A user's read marks are one ``InboxReadMonth`` row per month they acted in
(compressed bit-sets of item offsets: read now, ever read) and one
``InboxSeen`` row (the unseen watermark). A mark reads the month row and
writes it back only if it still holds what was read (compare and set: two
marks of one user in the same month never lose each other's bit; the one
that finds the row changed reads it again), so a lone mark costs two
statements in autocommit, no lock and no transaction of its own; only then
does Redis follow (``transaction.on_commit``, or the outbox when Redis is
down). A broadcast
costs nobody a row: only what the user did is written, and a "read all"
sets the bits of the items it read in the rows of their months.

After a Redis loss a user's fill restores these rows first (``messagecenter.fill``),
so every acknowledged mark is back before any item lands in the user's inbox.
"""

from collections import defaultdict
from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from datetime import datetime
from typing import Any

from django.db import connections, router, transaction
from pyroaring import BitMap

from core.bitmaps import bitmap_deserialize, bitmap_serialize
from messagecenter.models import InboxReadMonth, InboxSeen
from messagecenter.readmodel import InboxEntry

BATCH = 1000


def read_marks_commit(*, user_id: int, entries: Iterable[InboxEntry], read: bool, now: datetime) -> int:
    """Set (``read``) or clear the read bits of these items in the user's month rows;
    a read sets the ever-read bit too. Returns how many month rows it wrote (a
    row that already says so is not written).

    One month row's write is one compare and set, atomic by itself, so items
    of one month need no transaction (two statements, not four). Rows of
    several months commit together (or within the caller's transaction), so a
    failure leaves none of them half written."""
    by_month: dict[int, BitMap] = defaultdict(BitMap)
    for entry in entries:
        by_month[int(entry.month)].add(int(entry.offset))
    if not by_month:
        return 0
    # Adapted as the ORM adapts it (SQLite keeps datetimes as text).
    stamp = connections[router.db_for_write(InboxReadMonth)].ops.adapt_datetimefield_value(now)
    written = 0
    with transaction.atomic(savepoint=False) if len(by_month) > 1 else nullcontext():
        for pk, month, raw_read, raw_ever in _month_rows(user_id, sorted(by_month), now):
            written += _row_update(pk, raw_read, raw_ever, by_month[month], read=read, stamp=stamp)
    return written


# A row another mark changed between our read and our write is read again;
# each lost round means another mark of the same row was written meanwhile.
CAS_ROUNDS_MAX = 1000


def _row_update(pk: int, raw_read: bytes, raw_ever: bytes, offsets: BitMap, *, read: bool, stamp: Any) -> int:
    """Set or clear ``offsets`` in one month row by compare and set; 1 if it wrote."""
    for _ in range(CAS_ROUNDS_MAX):
        read_bits, ever_bits = bitmap_deserialize(raw_read), bitmap_deserialize(raw_ever)
        if read:
            new_read, new_ever = read_bits | offsets, ever_bits | offsets
        else:
            new_read, new_ever = read_bits - offsets, ever_bits
        if new_read == read_bits and new_ever == ever_bits:
            return 0  # already so: nothing to write
        if _execute_count(
            _CAS_SQL, [bitmap_serialize(new_read), bitmap_serialize(new_ever), stamp, pk, raw_read, raw_ever]
        ):
            return 1
        raw_read, raw_ever = _execute(_ROW_SQL, [pk])[0]
        raw_read, raw_ever = bytes(raw_read), bytes(raw_ever)
    raise RuntimeError(f"read month row {pk} kept changing")


# Every mark runs these, so they are plain statements: the ORM's query
# building and model instances cost a mark about as much as PostgreSQL's
# own work (bench: mark read / unread). The columns are the model's fields
# (none has a db_column).
_ROWS_SQL = "SELECT id, month, read, ever FROM {table} WHERE user_id = %s AND month IN ({months}) ORDER BY month"
_ROW_SQL = "SELECT read, ever FROM {table} WHERE id = %s"
_CAS_SQL = "UPDATE {table} SET read = %s, ever = %s, updated_at = %s WHERE id = %s AND read = %s AND ever = %s"


def _execute(sql: str, params: Sequence[Any], **names: str) -> list[tuple[Any, ...]]:
    """``sql`` with the table's quoted name (and ``names``) filled in, run with ``params``."""
    return _run(sql, params, names)[0]


def _execute_count(sql: str, params: Sequence[Any]) -> int:
    """``sql`` (a write) with the table's quoted name filled in; how many rows it changed."""
    return _run(sql, params, {})[1]


def _run(sql: str, params: Sequence[Any], names: dict[str, str]) -> tuple[list[tuple[Any, ...]], int]:
    connection = connections[router.db_for_write(InboxReadMonth)]
    table = connection.ops.quote_name(InboxReadMonth._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(sql.format(table=table, **names), params)
        return (list(cursor.fetchall()) if cursor.description else []), int(cursor.rowcount)


def _month_rows(user_id: int, months: list[int], now: datetime) -> list[tuple[int, int, bytes, bytes]]:
    """(id, month, read, ever) of the user's rows of these months (created empty
    where missing; a concurrent creator's row is taken, not duplicated)."""
    placeholders = ", ".join(["%s"] * len(months))
    # mc_inboxreadmonth_unique serves both lookups.
    rows = _execute(_ROWS_SQL, [user_id, *months], months=placeholders)
    if len(rows) < len(months):
        have = {row[1] for row in rows}
        InboxReadMonth.objects.bulk_create(
            [InboxReadMonth(user_id=user_id, month=m, updated_at=now) for m in months if m not in have],
            ignore_conflicts=True,
        )
        rows = _execute(_ROWS_SQL, [user_id, *months], months=placeholders)
    return [(int(pk), int(month), bytes(read), bytes(ever)) for pk, month, read, ever in rows]


def seen_commit(*, user_id: int, seen_ms: int, now: datetime) -> None:
    """Move the user's watermark forward to ``seen_ms`` (never back)."""
    with transaction.atomic(savepoint=False):
        InboxSeen.objects.bulk_create([InboxSeen(user_id=user_id, seen_ms=0, updated_at=now)], ignore_conflicts=True)
        InboxSeen.objects.filter(user_id=user_id, seen_ms__lt=seen_ms).update(seen_ms=seen_ms, updated_at=now)
