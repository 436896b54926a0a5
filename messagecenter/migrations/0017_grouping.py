from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('messagecenter', '0015_channels'),
    ]

    operations = [
        migrations.AddField(
            model_name='message',
            name='group_key',
            field=models.CharField(blank=True, default='', max_length=100),
        ),
        migrations.AddField(
            model_name='message',
            name='actor',
            field=models.CharField(blank=True, default='', max_length=100),
        ),
        migrations.AddField(
            model_name='notification',
            name='group_key',
            field=models.CharField(blank=True, default='', max_length=100),
        ),
        migrations.AddField(
            model_name='notification',
            name='actor',
            field=models.CharField(blank=True, default='', max_length=100),
        ),
    ]
