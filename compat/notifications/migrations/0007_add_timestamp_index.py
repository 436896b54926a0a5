import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("notifications", "0006_indexes")]

    operations = [
        migrations.AlterField(
            "notification", "timestamp", models.DateTimeField(db_index=True, default=django.utils.timezone.now)
        ),
    ]
