"""Loads the demo data: the operator, users, groups and one of every kind of item.

Each app contributes its demo loader (its AppConfig's ``demo_seed``); running
the command twice changes nothing the second time.
"""

from typing import Any, TextIO, cast

from django.core.management.base import BaseCommand
from django.db import transaction

from core.demo import demo_seeds


class Command(BaseCommand):
    help = "Create demo users, groups and items (idempotent)."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write("Demo data:")
        stdout = cast(TextIO, self.stdout)  # OutputWrapper: a text stream in all but its type
        for seed in demo_seeds():
            with transaction.atomic():
                seed(stdout)
        self.stdout.write(self.style.SUCCESS("Demo data ready."))
