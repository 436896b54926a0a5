from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("notifications", "0001_initial")]

    operations = [
        migrations.AddField("notification", "deleted", models.BooleanField(default=False)),
        migrations.AddField("notification", "emailed", models.BooleanField(default=False)),
    ]
