"""``manage.py snapshot_read_state``: copy changed read state to PostgreSQL now.

The same work as the periodic snapshot tasks (every
``MESSAGECENTER_SNAPSHOT_SECONDS``): every job the apps registered
(``core.snapshots.register``; announcement read bitmaps, inbox read bitmaps and
unseen watermarks) copies what changed since the last run. Useful before
planned Redis maintenance, to shrink the loss window to nothing.
"""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from core.progress import SILENT, Progress
from core.snapshots import snapshot_jobs


class Command(BaseCommand):
    help = "Snapshot changed read state (announcements and inboxes) to PostgreSQL now."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--quiet", action="store_true", help="print nothing but errors")

    def handle(self, *args: Any, quiet: bool = False, **options: Any) -> None:
        progress = SILENT if quiet else Progress(self.stdout)
        written = [(job.name, job.run(progress=progress)) for job in snapshot_jobs()]
        if not quiet:
            self.stdout.write(f"  rows written: {', '.join(f'{name} {rows}' for name, rows in written)}")
