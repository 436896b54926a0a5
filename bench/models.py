"""The bench's own baseline table as a model, for the ``bulk_create`` baseline.

Not an installed app and not managed: bench/data.py creates and drops the
table (``reset_baseline_table``) on each run; migrations never see it.
"""

from django.db import models


class RecipientRow(models.Model):
    id = models.BigAutoField(primary_key=True)
    user_id = models.IntegerField()
    item_id = models.IntegerField()
    category = models.CharField(max_length=16, default="system")
    unread = models.BooleanField(default=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "bench"
        managed = False
        db_table = "bench_recipient_row"

    def __str__(self) -> str:
        return f"user {self.user_id} item {self.item_id}"
