# index_together is gone from model options since Django 5.1, but its
# migration operation is kept for migrations like this one; 0010 names the index.
from django.conf import settings
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("notifications", "0007_add_timestamp_index"),
    ]

    operations = [
        migrations.AlterIndexTogether(name="notification", index_together={("recipient", "unread")}),
    ]
