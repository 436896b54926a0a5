# Verbose names on every field and on the model (no schema change).
import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

LEVELS = [("success", "success"), ("info", "info"), ("warning", "warning"), ("error", "error")]


def content_type(related_name: str, verbose_name: str, optional: bool) -> models.ForeignKey:
    return models.ForeignKey(
        blank=optional,
        null=optional,
        on_delete=django.db.models.deletion.CASCADE,
        related_name=related_name,
        to="contenttypes.contenttype",
        verbose_name=verbose_name,
    )


class Migration(migrations.Migration):
    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("notifications", "0008_index_together_recipient_unread"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="notification",
            options={"ordering": ("-timestamp",), "verbose_name": "Notification", "verbose_name_plural": "Notifications"},
        ),
        migrations.AlterField(
            "notification",
            "action_object_content_type",
            content_type("notify_action_object", "action object content type", optional=True),
        ),
        migrations.AlterField(
            "notification",
            "action_object_object_id",
            models.CharField(blank=True, max_length=255, null=True, verbose_name="action object object id"),
        ),
        migrations.AlterField(
            "notification", "actor_content_type", content_type("notify_actor", "actor content type", optional=False)
        ),
        migrations.AlterField(
            "notification", "actor_object_id", models.CharField(max_length=255, verbose_name="actor object id")
        ),
        migrations.AlterField("notification", "data", models.TextField(blank=True, null=True, verbose_name="data")),
        migrations.AlterField(
            "notification", "deleted", models.BooleanField(db_index=True, default=False, verbose_name="deleted")
        ),
        migrations.AlterField(
            "notification", "description", models.TextField(blank=True, null=True, verbose_name="description")
        ),
        migrations.AlterField(
            "notification", "emailed", models.BooleanField(db_index=True, default=False, verbose_name="emailed")
        ),
        migrations.AlterField(
            "notification",
            "level",
            models.CharField(choices=LEVELS, default="info", max_length=20, verbose_name="level"),
        ),
        migrations.AlterField(
            "notification", "public", models.BooleanField(db_index=True, default=True, verbose_name="public")
        ),
        migrations.AlterField(
            "notification",
            "recipient",
            models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="notifications",
                to=settings.AUTH_USER_MODEL,
                verbose_name="recipient",
            ),
        ),
        migrations.AlterField(
            "notification", "target_content_type", content_type("notify_target", "target content type", optional=True)
        ),
        migrations.AlterField(
            "notification",
            "target_object_id",
            models.CharField(blank=True, max_length=255, null=True, verbose_name="target object id"),
        ),
        migrations.AlterField(
            "notification",
            "timestamp",
            models.DateTimeField(db_index=True, default=django.utils.timezone.now, verbose_name="timestamp"),
        ),
        migrations.AlterField(
            "notification", "unread", models.BooleanField(db_index=True, default=True, verbose_name="unread")
        ),
        migrations.AlterField("notification", "verb", models.CharField(max_length=255, verbose_name="verb")),
    ]
