"""The inbox read state in PostgreSQL: committed before a mark is acknowledged.

A user's read marks are one ``InboxReadMonth`` row per month they acted in
(compressed bit-sets of item offsets: read now, ever read) and one
``InboxSeen`` row (the unseen watermark). A mark locks the month row
(``SELECT ... FOR UPDATE``: two marks of one user in the same month never
lose each other's bit), changes it and commits; only then does Redis follow
(``transaction.on_commit``, or the outbox when Redis is down). A broadcast
costs nobody a row: only what the user did is written, and a "read all"
sets the bits of the items it read in the rows of their months.

After a Redis loss the rebuild restores these rows first (``inbox_read_restore``),
so every acknowledged mark is back before any item lands in an inbox.
"""

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q
from pyroaring import BitMap

from core.bitmaps import bitmap_serialize
from core.progress import SILENT, Progress
from messagecenter.models import InboxReadMonth, InboxSeen
from messagecenter.readmodel import InboxEntry
from messagecenter.readmodel import read_state as readmodel

BATCH = 1000


def _bits(data: bytes | memoryview | None) -> BitMap:
    return BitMap.deserialize(bytes(data)) if data else BitMap()


def read_marks_commit(*, user_id: int, entries: Iterable[InboxEntry], read: bool, now: datetime) -> int:
    """Set (``read``) or clear the read bits of these items in the user's month rows;
    a read sets the ever-read bit too. Runs in (or as) a transaction; returns how
    many month rows it wrote."""
    by_month: dict[int, BitMap] = defaultdict(BitMap)
    for entry in entries:
        by_month[int(entry.month)].add(int(entry.offset))
    if not by_month:
        return 0
    with transaction.atomic():
        rows = _locked_months(user_id, sorted(by_month), now)
        for row in rows:
            offsets = by_month[row.month]
            read_bits, ever_bits = _bits(row.read), _bits(row.ever)
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
    with transaction.atomic():
        InboxSeen.objects.bulk_create([InboxSeen(user_id=user_id, seen_ms=0, updated_at=now)], ignore_conflicts=True)
        InboxSeen.objects.filter(user_id=user_id, seen_ms__lt=seen_ms).update(seen_ms=seen_ms, updated_at=now)


def _next_users(after: int, batch: int) -> list[int]:
    """The next ``batch`` user ids above ``after`` with any read state (two index range
    reads: mc_inboxreadmonth_unique leads with the user, the seen table's key is the user)."""
    read_ids = (
        InboxReadMonth.objects.filter(user_id__gt=after)
        .order_by("user_id")
        .values_list("user_id", flat=True)
        .distinct()[:batch]
    )
    seen_ids = InboxSeen.objects.filter(user_id__gt=after).order_by("user_id").values_list("user_id", flat=True)
    return sorted({*read_ids, *seen_ids[:batch]})[:batch]


def inbox_read_restore(*, batch: int = BATCH, progress: Progress = SILENT) -> int:
    """Write every user's committed read state into Redis where the keys are missing;
    returns how many keys/fields were written.

    Idempotent and safe while the site serves: bit-sets go in with SET NX and
    the watermark with HSETNX (marks since then, already in Redis, stay), and
    the unread counters of items already in an inbox are corrected in the same script.
    """
    total = (
        get_user_model()
        .objects.filter(Q(inbox_read_months__isnull=False) | Q(inbox_seen__isnull=False))
        .distinct()
        .count()
    )
    written = 0
    last = 0
    with progress.stage("inbox read state", total) as stage:
        while user_ids := _next_users(last, batch):
            last = user_ids[-1]
            users = {user_id: readmodel.UserReadState() for user_id in user_ids}
            rows = InboxReadMonth.objects.filter(user_id__in=user_ids).values_list("user_id", "month", "read", "ever")
            for user_id, month, read, ever in rows:
                users[user_id].months[month] = (_bits(read), _bits(ever))
            for user_id, seen_ms in InboxSeen.objects.filter(user_id__in=user_ids).values_list("user_id", "seen_ms"):
                users[user_id].seen_ms = seen_ms
            written += readmodel.read_state_restore(users=users)
            stage.advance(len(user_ids))
    return written
