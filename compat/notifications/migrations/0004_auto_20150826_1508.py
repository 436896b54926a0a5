import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("notifications", "0003_notification_data")]

    operations = [
        migrations.AlterField("notification", "timestamp", models.DateTimeField(default=django.utils.timezone.now)),
    ]
