"""``manage.py messagecenter_rebuild``: restore the inbox read model from PostgreSQL."""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from core.progress import SILENT, Progress
from messagecenter.services.rebuild import inbox_rebuild


class Command(BaseCommand):
    help = "Rebuild the message centre's Redis read model from PostgreSQL (idempotent, safe while serving)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--quiet", action="store_true", help="print nothing but errors")

    def handle(self, *args: Any, quiet: bool = False, **options: Any) -> None:
        done = inbox_rebuild(progress=SILENT if quiet else Progress(self.stdout))
        if not quiet:
            self.stdout.write("  " + ", ".join(f"{k}: {v}" for k, v in done.items()))
