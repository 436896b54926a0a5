"""The recipient rows a fill reads a user"s pushed items by, backfilled from
the audiences of the pushed items that are live (their fan-outs wrote Redis
entries before these rows existed)."""

from typing import Any

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models
from pyroaring import BitMap

BATCH = 1000


def _backfill(apps: Any, schema_editor: Any) -> None:
    pairs = (
        (
            apps.get_model("messagecenter", "Message").objects.filter(
                delivery="push", status__in=["delivering", "delivered"]
            ),
            apps.get_model("messagecenter", "MessageRecipient"),
            "message_id",
        ),
        (
            apps.get_model("messagecenter", "Notification").objects.filter(withdrawn=False, scheduled=False),
            apps.get_model("messagecenter", "NotificationRecipient"),
            "notification_id",
        ),
    )
    for items, model, field in pairs:
        for pk, audience in items.values_list("pk", "audience_bitmap").iterator(chunk_size=200):
            if audience:
                rows = [model(user_id=u, **{field: pk}) for u in BitMap.deserialize(bytes(audience))]
                model.objects.bulk_create(rows, batch_size=BATCH, ignore_conflicts=True)


class Migration(migrations.Migration):
    dependencies = [
        ("messagecenter", "0019_group_end_row"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="MessageRecipient",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "user_id", "message_id", blank=True, editable=False, primary_key=True, serialize=False
                    ),
                ),
                (
                    "message",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="recipient_rows",
                        to="messagecenter.message",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="NotificationRecipient",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "user_id", "notification_id", blank=True, editable=False, primary_key=True, serialize=False
                    ),
                ),
                (
                    "notification",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="recipient_rows",
                        to="messagecenter.notification",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
        ),
        migrations.RunPython(_backfill, migrations.RunPython.noop, elidable=True),
    ]
