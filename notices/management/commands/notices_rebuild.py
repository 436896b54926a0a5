"""Rebuild the announcements' Redis read model from PostgreSQL (``notices.rebuild``)."""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from durability.progress import SILENT, Progress
from notices.rebuild import announcements_rebuild


class Command(BaseCommand):
    help = "Restore announcement read bitmaps from PostgreSQL, then rebuild every platform's indexes."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--quiet", action="store_true", help="print nothing but errors")

    def handle(self, *args: Any, quiet: bool = False, **options: Any) -> None:
        announcements_rebuild(progress=SILENT if quiet else Progress(self.stdout))
