# The incumbent's schema, step by step under the incumbent's migration names:
# a database django-notifications-hq 1.8.3 migrated has 0001-0009 applied and
# only runs 0010 here. Written for this package (no jsonfield, swapper or
# model_utils); each step makes the same columns and indexes as the original.
import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

LEVELS = [("success", "success"), ("info", "info"), ("warning", "warning"), ("error", "error")]


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("contenttypes", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="Notification",
            fields=[
                ("id", models.AutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("level", models.CharField(choices=LEVELS, default="info", max_length=20)),
                ("unread", models.BooleanField(default=True)),
                ("actor_object_id", models.CharField(max_length=255)),
                ("verb", models.CharField(max_length=255)),
                ("description", models.TextField(blank=True, null=True)),
                ("target_object_id", models.CharField(blank=True, max_length=255, null=True)),
                ("action_object_object_id", models.CharField(blank=True, max_length=255, null=True)),
                ("timestamp", models.DateTimeField(default=django.utils.timezone.now)),
                ("public", models.BooleanField(default=True)),
                (
                    "action_object_content_type",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="notify_action_object",
                        to="contenttypes.contenttype",
                    ),
                ),
                (
                    "actor_content_type",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="notify_actor",
                        to="contenttypes.contenttype",
                    ),
                ),
                (
                    "recipient",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="notifications",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "target_content_type",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="notify_target",
                        to="contenttypes.contenttype",
                    ),
                ),
            ],
            options={"ordering": ("-timestamp",)},
        ),
    ]
