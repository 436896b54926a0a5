# The incumbent stored ``data`` with jsonfield: JSON as text. A text column
# here too, so that a database migrated by the incumbent matches this state;
# 0010 turns it into a JSON column.
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("notifications", "0002_auto_20150224_1134")]

    operations = [
        migrations.AddField("notification", "data", models.TextField(blank=True, null=True)),
    ]
