"""``manage.py rebuild_redis``: restore every Redis structure from PostgreSQL.

Idempotent and safe while the site serves: each app's rebuild writes the
state PostgreSQL holds now. Read marks live in Redis only (until durable
snapshots land), so a rebuild after Redis was lost shows items unread.
"""

from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand

REBUILDS = ("notices_rebuild", "messagecenter_rebuild")


class Command(BaseCommand):
    help = "Rebuild the whole Redis read model from PostgreSQL (idempotent)."

    def handle(self, *args: Any, **options: Any) -> None:
        for name in REBUILDS:
            self.stdout.write(f"{name}:")
            call_command(name, stdout=self.stdout)
        self.stdout.write(self.style.SUCCESS("Redis read model rebuilt."))
