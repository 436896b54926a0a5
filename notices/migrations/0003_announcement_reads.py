# Announcement read state becomes committed rows (one per reader and platform),
# written before a mark is acknowledged; the read-state snapshots they replace
# are copied into them, then dropped.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models
from pyroaring import BitMap


def snapshots_to_rows(apps, schema_editor):
    Snapshot = apps.get_model("notices", "AnnouncementReadSnapshot")
    Read = apps.get_model("notices", "AnnouncementRead")
    User = apps.get_model(*settings.AUTH_USER_MODEL.split("."))
    for snapshot in Snapshot.objects.all().iterator():
        readers = BitMap.deserialize(bytes(snapshot.readers)) if snapshot.readers else BitMap()
        ids = list(readers)
        for start in range(0, len(ids), 5000):
            existing = User.objects.filter(pk__in=ids[start : start + 5000]).values_list("pk", flat=True)
            Read.objects.bulk_create(
                [Read(announcement_id=snapshot.announcement_id, platform=snapshot.platform, user_id=pk) for pk in existing],
                ignore_conflicts=True,
            )


class Migration(migrations.Migration):

    dependencies = [
        ('notices', '0002_durable_read_state'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='AnnouncementRead',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('platform', models.CharField(choices=[('operator', 'Operator'), ('user', 'User'), ('customer', 'Customer')], max_length=16)),
                ('announcement', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='reads', to='notices.announcement')),
                ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='announcement_reads', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'indexes': [models.Index(fields=['user', 'announcement'], name='announcementread_user_idx')],
                'constraints': [models.UniqueConstraint(fields=('announcement', 'platform', 'user'), name='announcementread_unique')],
            },
        ),
        migrations.RunPython(snapshots_to_rows, migrations.RunPython.noop),
        migrations.DeleteModel(
            name='AnnouncementReadSnapshot',
        ),
    ]
