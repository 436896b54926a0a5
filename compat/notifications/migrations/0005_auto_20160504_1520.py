from django.db import migrations, models

LEVELS = [("success", "success"), ("info", "info"), ("warning", "warning"), ("error", "error")]


class Migration(migrations.Migration):
    dependencies = [("notifications", "0004_auto_20150826_1508")]

    operations = [
        migrations.AlterField("notification", "level", models.CharField(choices=LEVELS, default="info", max_length=20)),
    ]
