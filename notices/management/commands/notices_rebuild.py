"""Rebuild the announcements' Redis indexes from PostgreSQL.

Safe at any time (the revision check keeps the newest snapshot) and also the
way to prune announcements that expired since their platform last changed.
Read bits live only in Redis until the durable snapshot issue lands.
"""

from typing import Any

from django.core.management.base import BaseCommand

from core.platforms import ALL_PLATFORMS
from notices import readmodel


class Command(BaseCommand):
    help = "Rebuild the announcement indexes of every platform from PostgreSQL."

    def handle(self, *args: Any, **options: Any) -> None:
        for platform in ALL_PLATFORMS:
            readmodel.platform_sync(platform=platform)
            self.stdout.write(f"  rebuilt announcement indexes of {platform}")
