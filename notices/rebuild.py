"""Rebuild of the announcements' read model from PostgreSQL (after a Redis loss).

Safe at any time (the revision check keeps the newest index, and read
bitmaps are restored from their snapshots only where Redis has none) and also
the way to prune announcements that expired since their platform last changed.
"""

from core.platforms import ALL_PLATFORMS
from core.progress import SILENT, Progress
from notices import readmodel
from notices.snapshots import announcement_read_restore, announcement_read_save_held


def announcements_rebuild(*, progress: Progress = SILENT) -> dict[str, int]:
    """Restore read bitmaps, then rebuild every platform's indexes; returns what was touched."""
    # Read state of another layout (chunk size, format) goes first: what it
    # holds comes back from the snapshots below (brought up to date first,
    # where its layout says how to read it) and the marks journal after.
    saved = announcement_read_save_held(progress=progress)
    relaid = readmodel.layout_adopt()
    # Bitmaps first: restoring registers their chunks, which the syncs below then index.
    restored = announcement_read_restore(progress=progress)
    with progress.stage("announcement indexes", len(ALL_PLATFORMS)) as stage:
        for platform in ALL_PLATFORMS:
            readmodel.platform_sync(platform=platform)
            stage.advance()
    return {"read_state": restored, "platforms": len(ALL_PLATFORMS), "relaid": int(relaid), "saved": saved}
