"""``manage.py run_rules``: run the notification rules once, by hand."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from messagecenter import services
from messagecenter.models import NotificationRule


class Command(BaseCommand):
    help = "Run every enabled notification rule once (or --rule ID); --dry-run shows what would be sent."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--rule", type=int, action="append", dest="rules", help="Run only this rule (repeatable).")
        parser.add_argument("--dry-run", action="store_true", help="Send nothing; list what would be sent.")

    def handle(self, *args: Any, **options: Any) -> None:
        rules = NotificationRule.objects.select_related("content_type", "message_type")
        if options["rules"]:
            rules = rules.filter(pk__in=options["rules"])
            missing = set(options["rules"]) - set(rules.values_list("pk", flat=True))
            if missing:
                raise CommandError(f"Unknown rule id(s): {', '.join(map(str, sorted(missing)))}")
        else:
            rules = rules.filter(enabled=True)
        dry_run = bool(options["dry_run"])
        outcomes = services.rules_run(rules=list(rules), dry_run=dry_run)
        for outcome in outcomes:
            rule = outcome.rule
            if dry_run:
                self.stdout.write(
                    f"rule {rule.pk} {rule.name}: {outcome.matches} matching, {len(outcome.preview)} would be sent"
                )
                for row in outcome.preview:
                    self.stdout.write(f"  object {row.object_pk} [{row.scope}] {row.title}")
            else:
                self.stdout.write(
                    f"rule {rule.pk} {rule.name}: {outcome.matches} matching, "
                    f"{outcome.sent} sent, {outcome.withdrawn} withdrawn"
                )
            for error in outcome.errors:
                self.stderr.write(f"  error: {error}")
        total = sum(o.sent for o in outcomes)
        failed = sum(1 for o in outcomes if o.errors)
        verb = "would run" if dry_run else "ran"
        self.stdout.write(f"{len(outcomes)} rule(s) {verb}, {total} notification(s) sent, {failed} with errors")
