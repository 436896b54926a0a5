from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("notifications", "0005_auto_20160504_1520")]

    operations = [
        migrations.AlterField("notification", "deleted", models.BooleanField(db_index=True, default=False)),
        migrations.AlterField("notification", "emailed", models.BooleanField(db_index=True, default=False)),
        migrations.AlterField("notification", "public", models.BooleanField(db_index=True, default=True)),
        migrations.AlterField("notification", "unread", models.BooleanField(db_index=True, default=True)),
    ]
