"""The inbox read state in PostgreSQL: committed before a mark is acknowledged.

A user's read marks are one ``InboxReadMonth`` row per month they acted in
(compressed bit-sets of item offsets: read now, ever read) and one
``InboxSeen`` row (the unseen watermark). A mark locks the month row
(``SELECT ... FOR UPDATE``: two marks of one user in the same month never
lose each other's bit), changes it and commits; only then does Redis follow
(``transaction.on_commit``, or the outbox when Redis is down). A broadcast
costs nobody a row: only what the user did is written, and a "read all"
sets the bits of the items it read in the rows of their months.

After a Redis loss a user's fill restores these rows first (``messagecenter.fill``),
so every acknowledged mark is back before any item lands in the user's inbox.
"""

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from django.db import transaction
from pyroaring import BitMap

from core.bitmaps import bitmap_deserialize, bitmap_serialize
from messagecenter.models import InboxReadMonth, InboxSeen
from messagecenter.readmodel import InboxEntry

BATCH = 1000


def read_marks_commit(*, user_id: int, entries: Iterable[InboxEntry], read: bool, now: datetime) -> int:
    """Set (``read``) or clear the read bits of these items in the user's month rows;
    a read sets the ever-read bit too. Runs in (or as) a transaction; returns how
    many month rows it wrote."""
    by_month: dict[int, BitMap] = defaultdict(BitMap)
    for entry in entries:
        by_month[int(entry.month)].add(int(entry.offset))
    if not by_month:
        return 0
    # No savepoint inside the caller's transaction (two round trips a mark):
    # nothing here is caught, so an error aborts the whole write anyway.
    with transaction.atomic(savepoint=False):
        rows = _locked_months(user_id, sorted(by_month), now)
        for row in rows:
            offsets = by_month[row.month]
            read_bits, ever_bits = bitmap_deserialize(row.read), bitmap_deserialize(row.ever)
            if read:
                read_bits |= offsets
                ever_bits |= offsets
            else:
                read_bits -= offsets
            row.read, row.ever, row.updated_at = bitmap_serialize(read_bits), bitmap_serialize(ever_bits), now
        InboxReadMonth.objects.bulk_update(rows, ["read", "ever", "updated_at"])
    return len(rows)


def _locked_months(user_id: int, months: list[int], now: datetime) -> list[InboxReadMonth]:
    """The user's rows of these months, locked for this transaction (created empty
    where missing; a concurrent creator's row is taken, not duplicated)."""
    # mc_inboxreadmonth_unique serves both lookups.
    locked = InboxReadMonth.objects.select_for_update().filter(user_id=user_id, month__in=months)
    rows = list(locked.order_by("month"))
    if len(rows) < len(months):
        have = {row.month for row in rows}
        InboxReadMonth.objects.bulk_create(
            [InboxReadMonth(user_id=user_id, month=m, updated_at=now) for m in months if m not in have],
            ignore_conflicts=True,
        )
        rows = list(locked.order_by("month"))
    return rows


def seen_commit(*, user_id: int, seen_ms: int, now: datetime) -> None:
    """Move the user's watermark forward to ``seen_ms`` (never back)."""
    with transaction.atomic(savepoint=False):
        InboxSeen.objects.bulk_create([InboxSeen(user_id=user_id, seen_ms=0, updated_at=now)], ignore_conflicts=True)
        InboxSeen.objects.filter(user_id=user_id, seen_ms__lt=seen_ms).update(seen_ms=seen_ms, updated_at=now)
