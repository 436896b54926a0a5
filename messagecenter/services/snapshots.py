"""Durable snapshots of the inbox read state (Redis -> PostgreSQL -> Redis).

Read marks and the unseen watermark are written to Redis only. The snapshot
job copies what changed (the dirty set the inbox writes keep, see
``messagecenter.readmodel.snapshots``) into ``InboxReadSnapshot`` rows (per
user and month, the read and ever-read bitmaps as compressed pyroaring
BitMaps of item offsets) and ``InboxSeenSnapshot`` rows, every
``MESSAGECENTER_SNAPSHOT_SECONDS``. The rebuild writes them back where Redis
has nothing, before items are delivered, and keeps the unread counters exact.
Marks made since the last run are in the marks journal (``core.journal``),
which a run that drained everything then forgets up to its start.

A fresh Redis (flushed, or a new server) has no "restored" marker: the job
then restores from PostgreSQL before it copies anything, so the near-empty
bitmaps of marks made since the loss never overwrite good snapshots.
"""

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from pyroaring import BitMap

from core import healing, journal
from core.bitmaps import bitmap_serialize
from core.progress import SILENT, Progress
from core.snapshots import RedisLost, drain_dirty
from messagecenter.fallback import INBOX_TOPICS
from messagecenter.models import InboxReadSnapshot, InboxSeenSnapshot
from messagecenter.readmodel import snapshots as readmodel

BATCH = 1000


def inbox_read_snapshot(*, batch: int = BATCH, progress: Progress = SILENT) -> int:
    """Copy the changed read state to PostgreSQL; returns how many rows were written.

    Drains what was dirty when it started (a steady stream of marks cannot keep
    it running forever: later ones wait for the next run). If PostgreSQL fails,
    the batch goes back into the dirty set and the error propagates.
    """
    if not healing.ready():
        # Lost or being rebuilt: the rebuild restores the snapshots, and the
        # marks journal holds the marks made since, until a run after it.
        return 0
    if not readmodel.snapshot_restored():
        inbox_read_restore(progress=progress)
    started = journal.database_now()
    drained = drain_dirty(
        label="inbox snapshots",
        pending=readmodel.snapshot_dirty_count(),
        pop=lambda count: readmodel.snapshot_dirty_pop(count=count),
        give_back=lambda members: readmodel.snapshot_dirty_return(members=members),
        write=_snapshot_batch,
        batch=batch,
        progress=progress,
    )
    if drained.emptied:
        # Every mark journaled before the run started is in the rows just
        # written (or in earlier ones).
        journal.compact(topics=INBOX_TOPICS, before=started)
    return drained.written


def _snapshot_batch(members: list[readmodel.DirtyMember]) -> int:
    state = readmodel.snapshot_read(members=members)
    if not state.intact:
        raise RedisLost
    # Users deleted since their mark have nothing left to snapshot (rows cascade).
    users = set(get_user_model().objects.filter(pk__in={u for u, _ in members}).values_list("pk", flat=True))
    now = timezone.now()
    month_rows = []
    missing = Q()
    for (user_id, month), (read, ever) in state.months.items():
        if user_id not in users:
            continue
        if read is None and ever is None:
            # No bitmap at all (a month noted by "read all" that had nothing
            # to mark): the snapshot holds nothing either.
            missing |= Q(user_id=user_id, month=month)
            continue
        month_rows.append(
            InboxReadSnapshot(
                user_id=user_id,
                month=month,
                read=bitmap_serialize(read or BitMap()),
                ever=bitmap_serialize(ever or BitMap()),
                updated_at=now,
            )
        )
    seen_rows = [
        InboxSeenSnapshot(user_id=user_id, seen_ms=seen, updated_at=now)
        for user_id, seen in state.seen.items()
        if seen is not None and user_id in users
    ]
    with transaction.atomic():
        if month_rows:
            InboxReadSnapshot.objects.bulk_create(
                month_rows,
                update_conflicts=True,
                unique_fields=["user", "month"],
                update_fields=["read", "ever", "updated_at"],
            )
        if seen_rows:
            InboxSeenSnapshot.objects.bulk_create(
                seen_rows, update_conflicts=True, unique_fields=["user"], update_fields=["seen_ms", "updated_at"]
            )
        if missing:
            InboxReadSnapshot.objects.filter(missing).delete()
    return len(month_rows) + len(seen_rows)


def _next_users(after: int, batch: int) -> list[int]:
    """The next ``batch`` user ids above ``after`` that have any snapshot (two index range reads:
    mc_inboxreadsnapshot_unique leads with the user, the seen table's key is the user)."""
    read_ids = (
        InboxReadSnapshot.objects.filter(user_id__gt=after)
        .order_by("user_id")
        .values_list("user_id", flat=True)
        .distinct()[:batch]
    )
    seen_ids = InboxSeenSnapshot.objects.filter(user_id__gt=after).order_by("user_id").values_list("user_id", flat=True)
    return sorted({*read_ids, *seen_ids[:batch]})[:batch]


def inbox_read_restore(*, batch: int = BATCH, progress: Progress = SILENT) -> int:
    """Write every user's snapshot back into Redis where the keys are missing; returns
    how many keys/fields were written.

    Idempotent and safe while the site serves: bitmaps go in with SET NX and
    the watermark with HSETNX (newer marks win), and the unread counters of
    items already in an inbox are corrected in the same script. Afterwards the
    restored marker lets the snapshot job copy again.
    """
    total = (
        get_user_model()
        .objects.filter(Q(inbox_read_snapshots__isnull=False) | Q(inbox_seen_snapshot__isnull=False))
        .distinct()
        .count()
    )
    written = 0
    last = 0
    with progress.stage("inbox read state", total) as stage:
        while user_ids := _next_users(last, batch):
            last = user_ids[-1]
            users = {user_id: readmodel.UserSnapshot() for user_id in user_ids}
            rows = InboxReadSnapshot.objects.filter(user_id__in=user_ids).values_list(
                "user_id", "month", "read", "ever"
            )
            for user_id, month, read, ever in rows:
                users[user_id].months[month] = (_bits(read), _bits(ever))
            for user_id, seen_ms in InboxSeenSnapshot.objects.filter(user_id__in=user_ids).values_list(
                "user_id", "seen_ms"
            ):
                users[user_id].seen_ms = seen_ms
            written += readmodel.snapshot_restore(users=users)
            stage.advance(len(user_ids))
    readmodel.snapshot_restored_set()
    return written


def _bits(data: bytes | memoryview | None) -> BitMap:
    return BitMap.deserialize(bytes(data)) if data else BitMap()
