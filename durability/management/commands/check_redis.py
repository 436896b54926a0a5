"""``manage.py check_redis [--repair] [--area AREA ...]``: drift between PostgreSQL
and the Redis read model, reported and (with ``--repair``) mended.

Exit status: 0 clean (or everything repaired), 1 drift remains, 2 Redis
unreachable. Every run is recorded as a ``RedisCheckRun`` (the admin shows it).
"""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from durability.drift import AreaResult, CheckResult, UnknownArea, check_run, drift_checks

EXIT_DRIFT = 1
EXIT_REDIS_DOWN = 2
# Findings printed per area; the run row keeps the first 200 of all areas.
SHOWN_PER_AREA = 50


class Command(BaseCommand):
    help = "Report (and with --repair mend) drift between PostgreSQL and the Redis read model."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--repair", action="store_true", help="Mend what drifted, then check again.")
        parser.add_argument(
            "--area",
            action="append",
            dest="areas",
            metavar="AREA",
            help=f"Only this area (repeatable): {', '.join(drift_checks())}.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            result = check_run(repair=bool(options["repair"]), areas=options["areas"])
        except UnknownArea as exc:
            raise CommandError(str(exc)) from exc
        if result.error:
            self.stderr.write(self.style.ERROR(f"{result.error} (run #{result.run.pk} recorded)"))
            raise SystemExit(EXIT_REDIS_DOWN)
        for area in result.areas:
            self._report(area)
        self.stdout.write(self._summary(result))
        if result.remaining_count:
            raise SystemExit(EXIT_DRIFT)

    def _report(self, area: AreaResult) -> None:
        if not area.found:
            self.stdout.write(f"{area.area}: {self.style.SUCCESS('ok')}")
            return
        line = f"{area.area}: {len(area.found)} drifted"
        if area.remaining is not None:
            line += f", {len(area.repaired)} repaired, {len(area.remaining)} remaining"
        self.stdout.write(self.style.WARNING(line))
        repaired = {f.ident for f in area.repaired}
        for finding in area.found[:SHOWN_PER_AREA]:
            where = f"{finding.key} [{finding.member}]" if finding.member else finding.key
            mark = " (repaired)" if finding.ident in repaired else ""
            self.stdout.write(f"  - {where}: {finding.detail}{mark}")
        if len(area.found) > SHOWN_PER_AREA:
            self.stdout.write(f"  ... and {len(area.found) - SHOWN_PER_AREA} more")

    def _summary(self, result: CheckResult) -> str:
        run = f"run #{result.run.pk}"
        if not result.drift_count:
            return self.style.SUCCESS(f"Redis read model is clean ({run}).")
        if not result.remaining_count:
            return self.style.SUCCESS(f"{result.drift_count} drifted, all repaired ({run}).")
        hint = "" if result.run.repair else " Run with --repair to mend it."
        return self.style.ERROR(f"{result.remaining_count} drift remaining ({run}).{hint}")
