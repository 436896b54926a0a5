"""Durable snapshots of the announcements' read bitmaps (Redis -> PostgreSQL -> Redis).

Read marks are written to Redis only (a bit per user, no row per read). The
snapshot job copies the bitmaps that changed (the dirty set kept by
``readmodel.mark``) into ``AnnouncementReadSnapshot`` rows, one compressed
pyroaring BitMap of user ids per (announcement, platform), every
``MESSAGECENTER_SNAPSHOT_SECONDS``. The rebuild writes them back where Redis
has no bitmap. Marks made since the last run are in the marks journal
(``core.journal``), which a run that drained everything then forgets up to
its start.

A fresh Redis (flushed, or a new server) has no "restored" marker: the job
then restores from PostgreSQL before it copies anything, so the near-empty
bitmaps of marks made since the loss never overwrite good snapshots.
"""

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone
from pyroaring import BitMap

from core import healing, journal
from core.bitmaps import bitmap_serialize
from core.progress import SILENT, Progress
from core.snapshots import RedisLost, drain_dirty
from notices import readmodel
from notices.models import AnnouncementPlatform, AnnouncementReadSnapshot
from notices.selectors import READ_TOPIC

BATCH = 1000


def announcement_read_snapshot(*, batch: int = BATCH, progress: Progress = SILENT) -> int:
    """Copy the changed read bitmaps to PostgreSQL; returns how many rows were written.

    Drains what was dirty when it started (a steady stream of marks cannot keep
    it running forever: later ones wait for the next run). If PostgreSQL fails,
    the batch goes back into the dirty set and the error propagates (the task retries).
    """
    if not healing.ready():
        # Lost or being rebuilt: the rebuild restores the snapshots, and the
        # marks journal holds the marks made since, until a run after it.
        return 0
    if not readmodel.snapshot_restored():
        announcement_read_restore(progress=progress)
    started = journal.database_now()
    drained = drain_dirty(
        label="announcement snapshots",
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
        journal.compact(topics=[READ_TOPIC], before=started)
    return drained.written


def announcement_read_save_held(*, batch: int = BATCH, progress: Progress = SILENT) -> int:
    """Before the read state is laid out anew (``readmodel.layout_adopt``): copy what
    changed since the last snapshot, read under the layout Redis still holds, so the
    rebuild restores it from here (the marks journal alone would count those reads
    again in the read-rate chart). Nothing when Redis does not say its layout."""
    held = readmodel.layout_held()
    if held is None:
        return 0
    drained = drain_dirty(
        label="announcement snapshots (previous layout)",
        pending=readmodel.snapshot_dirty_count(),
        pop=lambda count: readmodel.snapshot_dirty_pop(count=count),
        give_back=lambda members: readmodel.snapshot_dirty_return(members=members),
        write=lambda members: _snapshot_batch(members, held=held),
        batch=batch,
        progress=progress,
    )
    return drained.written


def _snapshot_batch(members: list[readmodel.SnapshotMember], held: tuple[int, int] | None = None) -> int:
    readers, intact = readmodel.snapshot_readers(members=members, held=held)
    if not intact:
        raise RedisLost
    ids = {pk for _, pk in members}
    # Announcement taken off a platform (or deleted): its bitmap was dropped
    # and must not come back; the row goes too (a delete cascades anyway).
    targeted = set(
        AnnouncementPlatform.objects.filter(announcement_id__in=ids).values_list("platform", "announcement_id")
    )
    now = timezone.now()
    rows = [
        AnnouncementReadSnapshot(announcement_id=pk, platform=platform, readers=bitmap_serialize(bits), updated_at=now)
        for (platform, pk), bits in readers.items()
        if (platform, pk) in targeted
    ]
    gone = [member for member in readers if member not in targeted]
    with transaction.atomic():
        if rows:
            AnnouncementReadSnapshot.objects.bulk_create(
                rows,
                update_conflicts=True,
                unique_fields=["announcement", "platform"],
                update_fields=["readers", "updated_at"],
            )
        if gone:
            condition = Q()
            for platform, pk in gone:
                condition |= Q(announcement_id=pk, platform=platform)
            AnnouncementReadSnapshot.objects.filter(condition).delete()
    return len(rows)


def announcement_read_restore(*, batch: int = BATCH, progress: Progress = SILENT) -> int:
    """Write every snapshot back into Redis where the bitmap is missing; returns keys written.

    Only for platforms the announcement still targets. Idempotent and safe
    while the site serves (SET NX keeps any newer mark); afterwards the
    restored marker lets the snapshot job copy again.
    """
    # The join on the platform rows uses announcementplatform_unique.
    snapshots = AnnouncementReadSnapshot.objects.filter(announcement__platform_rows__platform=F("platform"))
    total = snapshots.count()
    written = 0
    last = 0
    with progress.stage("announcement read state", total) as stage:
        while True:
            # Keyset paging on the primary key: each batch is one indexed range read.
            rows = list(
                snapshots.filter(pk__gt=last)
                .order_by("pk")
                .values_list("pk", "platform", "announcement_id", "readers")[:batch]
            )
            if not rows:
                break
            last = rows[-1][0]
            readers = {(platform, pk): BitMap.deserialize(bytes(data)) for _, platform, pk, data in rows if data}
            written += readmodel.snapshot_restore(readers=readers)
            stage.advance(len(rows))
    readmodel.snapshot_restored_set()
    return written
