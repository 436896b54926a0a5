"""``manage.py notifications_import``: django-notifications-hq's rows from its
own database into this project (``notifications.services.importing``)."""

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from notifications.services.importing import ImportRefused, ImportReport, notifications_import
from notifications.sources import SourceError, is_project_database, source_open


class Command(BaseCommand):
    help = (
        "Import the notifications of a django-notifications-hq database (ids kept), in batches. "
        "Safe to run again: rows imported already are skipped, so a stopped run resumes."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        where = parser.add_mutually_exclusive_group(required=True)
        where.add_argument("--database", metavar="ALIAS", help="the incumbent's database: one of DATABASES")
        where.add_argument(
            "--database-url",
            metavar="URL",
            help="the incumbent's database: sqlite:////path/to/db.sqlite3 or postgres://user@host:5432/name",
        )
        parser.add_argument("--batch-size", type=int, default=1000, help="rows per transaction (default 1000)")
        parser.add_argument("--after-id", type=int, default=0, help="start after this notification id")
        parser.add_argument(
            "--match-users",
            choices=["id", "username"],
            default="id",
            help="how recipients are found here: the same user ids (default), or the same usernames",
        )
        parser.add_argument(
            "--source-user-table",
            default="auth_user",
            help="the incumbent's user table, read with --match-users=username (default auth_user)",
        )
        parser.add_argument(
            "--skip-missing-users",
            action="store_true",
            help="skip (and count) the notifications of users missing here instead of refusing to start",
        )
        parser.add_argument(
            "--inbox",
            choices=["unread", "none"],
            default="unread",
            help="deliver the unread notifications into the inbox, one message per send (default), or not",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if is_project_database(alias=options["database"], url=options["database_url"]):
            raise CommandError(
                "The source is this project's own database: `migrate` adopts its notifications table "
                "in place, there is nothing to import."
            )
        try:
            source = source_open(alias=options["database"], url=options["database_url"])
        except SourceError as exc:
            raise CommandError(str(exc)) from exc
        try:
            report = notifications_import(
                source=source,
                batch_size=options["batch_size"],
                after_id=options["after_id"],
                users_by=options["match_users"],
                user_table=options["source_user_table"],
                skip_missing_users=options["skip_missing_users"],
                deliver=options["inbox"] == "unread",
                progress=self._progress,
            )
        except (ImportRefused, SourceError) as exc:
            raise CommandError(str(exc)) from exc
        finally:
            source.close()
        self.stdout.write(
            self.style.SUCCESS(
                f"Imported {report.imported} notifications from {source.name} "
                f"({report.present} here already, {report.skipped_users} of missing users skipped); "
                f"{report.messages} sends delivered into the inbox."
            )
        )
        if report.missing_users:
            self.stdout.write(f"Users missing here: {', '.join(map(str, report.missing_users[:20]))}")

    def _progress(self, report: ImportReport) -> None:
        done = report.imported + report.present + report.skipped_users
        self.stdout.write(f"  up to id {report.last_id}: {done} of {report.rows} rows ({report.imported} new)")
