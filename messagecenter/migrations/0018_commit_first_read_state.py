# The read-state snapshots become the committed read state (written by each
# mark before it is acknowledged): renamed, their rows kept as they are.

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('messagecenter', '0016_actions_translations'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='inboxreadsnapshot',
            name='mc_inboxreadsnapshot_unique',
        ),
        migrations.RenameModel(
            old_name='InboxReadSnapshot',
            new_name='InboxReadMonth',
        ),
        migrations.RenameModel(
            old_name='InboxSeenSnapshot',
            new_name='InboxSeen',
        ),
        migrations.AlterField(
            model_name='inboxreadmonth',
            name='user',
            field=models.ForeignKey(on_delete=models.deletion.CASCADE, related_name='inbox_read_months', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AlterField(
            model_name='inboxseen',
            name='user',
            field=models.OneToOneField(on_delete=models.deletion.CASCADE, primary_key=True, related_name='inbox_seen', serialize=False, to=settings.AUTH_USER_MODEL),
        ),
        migrations.AddConstraint(
            model_name='inboxreadmonth',
            constraint=models.UniqueConstraint(fields=('user', 'month'), name='mc_inboxreadmonth_unique'),
        ),
    ]
