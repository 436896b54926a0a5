"""``manage.py rebuild_redis``: restore every Redis structure from PostgreSQL.

Idempotent and safe while the site serves: each app's rebuild step (its
AppConfig's ``rebuild_step``, a ``durability.rebuild.RebuildStep``) writes what PostgreSQL holds now, and
restores read state (announcement read bitmaps, inbox read bitmaps, unseen
watermarks) from the committed rows only where Redis has none, so a mark
made meanwhile is never undone; the outbox is applied on top. It ends by writing a new read-model generation, and holds
the same lock as the automatic rebuild (``durability.healing``), waiting for one in
progress. Batched, with a progress bar on a terminal and one line per stage otherwise.
"""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from durability import rebuild
from durability.progress import SILENT, Progress


class Command(BaseCommand):
    help = "Rebuild the whole Redis read model from PostgreSQL, read state included (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--quiet", action="store_true", help="print nothing but errors")

    def handle(self, *args: Any, quiet: bool = False, **options: Any) -> None:
        result = rebuild.rebuild(progress=SILENT if quiet else Progress(self.stdout))
        if not quiet and result is not None:
            for name, done in result.steps.items():
                summary = ", ".join(f"{k}: {v}" for k, v in (done or {}).items())
                self.stdout.write(f"  {name}: {summary}")
            self.stdout.write(
                self.style.SUCCESS(
                    f"Redis read model rebuilt. Generation {result.generation} in {result.seconds:.1f}s "
                    f"(outbox entries {result.outbox})."
                )
            )
