"""Outbox entries queued by earlier versions for the Redis half of one inbox
mark (topics ``inbox.read``, ``inbox.read_all``, ``inbox.seen``, ``inbox.hide``,
``inbox.group_end``) become what a missed write is recorded as now: the user's
part is stale (``inbox.stale``), dropped on replay and filled again from
PostgreSQL, which has the mark."""

from typing import Any

from django.db import migrations

OLD_TOPICS = ("inbox.read", "inbox.read_all", "inbox.seen", "inbox.hide", "inbox.group_end")


def _stale(apps: Any, schema_editor: Any) -> None:
    entries = apps.get_model("durability", "OutboxEntry").objects
    entries.filter(topic__in=OLD_TOPICS, user_id__isnull=False).update(topic="inbox.stale", payload={})


class Migration(migrations.Migration):
    dependencies = [
        ("messagecenter", "0020_recipients"),
        ("durability", "0001_initial"),
    ]

    operations = [migrations.RunPython(_stale, migrations.RunPython.noop, elidable=True)]
