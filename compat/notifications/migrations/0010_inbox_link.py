# The one step past the incumbent's schema:
# - its unnamed (recipient, unread) index gets a name (Django 5.1 dropped
#   index_together); the index itself stays;
# - ``data`` becomes a JSON column (jsonb on PostgreSQL), cast from the JSON text;
# - InboxLink: each row's item in the message centre's inbox.
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("messagecenter", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("notifications", "0009_alter_notification_options_and_more"),
    ]

    operations = [
        migrations.RenameIndex(
            model_name="notification", new_name="notif_recipient_unread_idx", old_fields=("recipient", "unread")
        ),
        migrations.AlterField(
            model_name="notification", name="data", field=models.JSONField(blank=True, null=True, verbose_name="data")
        ),
        migrations.CreateModel(
            name="InboxLink",
            fields=[
                (
                    "notification",
                    models.OneToOneField(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        primary_key=True,
                        related_name="inbox_link",
                        serialize=False,
                        to="notifications.notification",
                    ),
                ),
                ("unread", models.BooleanField(default=True)),
                (
                    "message",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="messagecenter.message"
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["user", "unread"], name="notif_inboxlink_user_idx")],
            },
        ),
    ]
