"""``manage.py snapshot_read_state``: copy changed read state to PostgreSQL now.

The same work as the periodic snapshot tasks (every
``MESSAGECENTER_SNAPSHOT_SECONDS``): announcement read bitmaps, inbox read
bitmaps and unseen watermarks that changed since the last run. Useful before
planned Redis maintenance, to shrink the loss window to nothing.
"""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from core.progress import SILENT, Progress
from messagecenter.services.snapshots import inbox_read_snapshot
from notices.snapshots import announcement_read_snapshot


class Command(BaseCommand):
    help = "Snapshot changed read state (announcements and inboxes) to PostgreSQL now."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--quiet", action="store_true", help="print nothing but errors")

    def handle(self, *args: Any, quiet: bool = False, **options: Any) -> None:
        progress = SILENT if quiet else Progress(self.stdout)
        announcements = announcement_read_snapshot(progress=progress)
        inboxes = inbox_read_snapshot(progress=progress)
        if not quiet:
            self.stdout.write(f"  rows written: announcements {announcements}, inboxes {inboxes}")
