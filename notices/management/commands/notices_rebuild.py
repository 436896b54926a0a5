"""Rebuild the announcements' Redis read model from PostgreSQL.

Safe at any time (the revision check keeps the newest index, and read
bitmaps are restored from their snapshots only where Redis has none) and also
the way to prune announcements that expired since their platform last changed.
"""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from core.platforms import ALL_PLATFORMS
from core.progress import SILENT, Progress
from notices import readmodel
from notices.snapshots import announcement_read_restore


class Command(BaseCommand):
    help = "Restore announcement read bitmaps from their snapshots, then rebuild every platform's indexes."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--quiet", action="store_true", help="print nothing but errors")

    def handle(self, *args: Any, quiet: bool = False, **options: Any) -> None:
        progress = SILENT if quiet else Progress(self.stdout)
        # Bitmaps first: restoring registers their chunks, which the syncs below then index.
        announcement_read_restore(progress=progress)
        with progress.stage("announcement indexes", len(ALL_PLATFORMS)) as stage:
            for platform in ALL_PLATFORMS:
                readmodel.platform_sync(platform=platform)
                stage.advance()
