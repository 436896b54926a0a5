# Every acknowledged mark is committed to PostgreSQL before its answer: the
# journal that kept them until a read-state snapshot held them goes.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('core', '0006_api_tokens'),
    ]

    operations = [
        migrations.DeleteModel(
            name='MarkJournal',
        ),
    ]
