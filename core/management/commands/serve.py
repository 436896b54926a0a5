"""``manage.py serve``: what ``make run`` starts.

Loads the demo data and serves in one process. On the embedded default the
Redis read model lives in this process's memory (fakeredis), so it is
rebuilt from PostgreSQL here, and the demo data written here, before serving:
a separate seeding process, or runserver's auto-reloader child, would each
have a Redis of their own. A read replica that does not answer stops it
first, with the reason (core/replicas.py).
"""

import sys
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.replicas import check_replicas_reachable


class Command(BaseCommand):
    help = "Load the demo data, make sure the read model is built, and serve (development server)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("addrport", nargs="?", default="127.0.0.1:8000")
        parser.add_argument("--no-demo", action="store_true", help="skip loading the demo data")

    def handle(self, *args: Any, addrport: str, no_demo: bool, **options: Any) -> None:
        try:
            check_replicas_reachable()
        except ImproperlyConfigured as error:
            raise CommandError(str(error)) from None
        # The stream this command writes to, not its wrapper: a wrapper around
        # a wrapper would end the rebuild's progress bar's every redraw with a newline.
        stream = options.get("stdout") or sys.stdout
        if settings.REDIS_EMBEDDED:
            call_command("rebuild_redis", stdout=stream)
        if not no_demo:
            call_command("seed_demo", stdout=stream)
        url = f"http://{addrport}"
        self.stdout.write(
            f"\n  Inbox:     {url}/inbox/\n  Admin:     {url}/admin/   (admin / admin)\n  API docs:  {url}/api/docs/\n"
        )
        # No auto-reloader: its child process would start with an empty embedded Redis.
        call_command("runserver", addrport, use_reloader=not settings.REDIS_EMBEDDED)
