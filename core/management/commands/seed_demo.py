"""Loads the demo data: the operator, users, groups and one of every kind of item.

Each app contributes through an optional ``<app>.demo.seed(stdout)``; running
the command twice changes nothing the second time.
"""

from importlib import import_module
from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction

DEMO_APPS = ("core", "notices", "messagecenter")


class Command(BaseCommand):
    help = "Create demo users, groups and items (idempotent)."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write("Demo data:")
        for app in DEMO_APPS:
            try:
                module = import_module(f"{app}.demo")
            except ModuleNotFoundError as exc:
                if exc.name != f"{app}.demo":
                    raise
                continue
            with transaction.atomic():
                module.seed(self.stdout)
        self.stdout.write(self.style.SUCCESS("Demo data ready."))
