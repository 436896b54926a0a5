"""Rebuild of the announcements' read model from PostgreSQL (after a Redis loss).

Safe at any time (the revision check keeps the newest index, and read
bitmaps are restored from the committed ``AnnouncementRead`` rows only where
Redis has none) and also the way to prune announcements that expired since
their platform last changed.
"""

from accounts.platforms import ALL_PLATFORMS
from durability.progress import SILENT, Progress
from durability.rebuild import RebuildStep
from notices import readmodel
from notices.models import AnnouncementPlatform
from notices.read_rows import announcement_readers_all


def announcement_read_restore(*, progress: Progress = SILENT) -> int:
    """Write every announcement's readers back into Redis where the bitmap is missing
    (SET NX keeps any newer mark), on the platforms it still targets; returns keys written."""
    total = AnnouncementPlatform.objects.filter(announcement__reads__isnull=False).distinct().count()
    written = 0
    with progress.stage("announcement read state", total) as stage:
        for member, readers in announcement_readers_all():
            if readers:
                written += readmodel.readers_restore(readers={member: readers})
            stage.advance()
    return written


def announcements_rebuild(*, progress: Progress = SILENT) -> dict[str, int]:
    """Restore read bitmaps, then rebuild every platform's indexes; returns what was touched."""
    # Read state of another layout (chunk size, format) goes first: the rows
    # restore it below under this process's layout.
    relaid = readmodel.layout_adopt()
    # Bitmaps first: restoring registers their chunks, which the syncs below then index.
    restored = announcement_read_restore(progress=progress)
    with progress.stage("announcement indexes", len(ALL_PLATFORMS)) as stage:
        for platform in ALL_PLATFORMS:
            readmodel.platform_sync(platform=platform)
            stage.advance()
    return {"read_state": restored, "platforms": len(ALL_PLATFORMS), "relaid": int(relaid)}


# The first step of the rebuild (notices' AppConfig names it).
REBUILD_STEP = RebuildStep("notices", 10, lambda progress: announcements_rebuild(progress=progress))
