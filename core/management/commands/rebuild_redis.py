"""``manage.py rebuild_redis``: restore every Redis structure from PostgreSQL.

Runs every app's rebuild command (``core.rebuild.register``) in turn.
Idempotent and safe while the site serves: each app's rebuild writes what
PostgreSQL holds now, and restores read state (announcement read bitmaps,
inbox read bitmaps, unseen watermarks) from the durable snapshots only where
Redis has none, so a mark newer than its snapshot is never undone. After a
Redis loss, read state comes back as of the last snapshot (at most
``MESSAGECENTER_SNAPSHOT_SECONDS`` old while the snapshot job runs).
Batched, with a progress bar on a terminal and one line per stage otherwise.
"""

from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from core.rebuild import rebuild_commands


class Command(BaseCommand):
    help = "Rebuild the whole Redis read model from PostgreSQL, read state from its snapshots (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--quiet", action="store_true", help="print nothing but errors")

    def handle(self, *args: Any, quiet: bool = False, **options: Any) -> None:
        for name in rebuild_commands():
            if not quiet:
                self.stdout.write(f"{name}:")
            call_command(name, stdout=self.stdout, quiet=quiet)
        if not quiet:
            self.stdout.write(self.style.SUCCESS("Redis read model rebuilt."))
