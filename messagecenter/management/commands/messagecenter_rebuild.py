"""``manage.py messagecenter_rebuild``: restore the inbox read model from PostgreSQL."""

from typing import Any

from django.core.management.base import BaseCommand

from messagecenter.services.rebuild import inbox_rebuild


class Command(BaseCommand):
    help = "Rebuild the message centre's Redis read model from PostgreSQL (idempotent)."

    def handle(self, *args: Any, **options: Any) -> None:
        done = inbox_rebuild()
        self.stdout.write(", ".join(f"{k}: {v}" for k, v in done.items()))
