"""``manage.py messagecenter_rebuild``: restore the inbox read model from PostgreSQL.

What users share is restored at once; each user's own part is filled on the
user's first read (``messagecenter.fill``). ``--warm`` fills every user now
(or ``--users`` those named), for an operator who wants Redis warm before
traffic comes back.
"""

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from durability.progress import SILENT, Progress
from messagecenter.fill import inbox_warm
from messagecenter.services.rebuild import inbox_rebuild

WARM_BATCH = 500


class Command(BaseCommand):
    help = "Rebuild the message centre's Redis read model from PostgreSQL (idempotent, safe while serving)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--quiet", action="store_true", help="print nothing but errors")
        parser.add_argument("--warm", action="store_true", help="also fill every user's part now")
        parser.add_argument("--users", default="", help="fill these users' parts now (ids, comma-separated)")

    def handle(self, *args: Any, quiet: bool = False, warm: bool = False, users: str = "", **options: Any) -> None:
        try:
            named = [int(part) for part in users.split(",") if part.strip()]
        except ValueError as exc:
            raise CommandError(f"--users takes user ids separated by commas, not {users!r}.") from exc
        progress = SILENT if quiet else Progress(self.stdout)
        done = inbox_rebuild(progress=progress)
        if warm or named:
            ids = named or list(get_user_model().objects.order_by("pk").values_list("pk", flat=True))
            filled = 0
            with progress.stage("users filled", len(ids)) as stage:
                for start in range(0, len(ids), WARM_BATCH):
                    batch = ids[start : start + WARM_BATCH]
                    filled += inbox_warm(user_ids=batch)
                    stage.advance(len(batch))
            done["users_filled"] = filled
        if not quiet:
            self.stdout.write("  " + ", ".join(f"{k}: {v}" for k, v in done.items()))
