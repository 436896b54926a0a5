"""The audit log's one table."""

from django.conf import settings
from django.db import models
from django.db.models.functions import Now


class AuditEntry(models.Model):
    """One operator write (through the manage API or Django admin).

    Written in the transaction of the write itself (``audit.services.audit_record``),
    so a write that rolls back leaves no entry and a committed one always has its
    entry. ``actor_name`` keeps the username as it was: the entry outlives the user.
    """

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_name = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=64)
    object_type = models.CharField(max_length=100)  # app_label.model, e.g. messagecenter.message
    object_id = models.CharField(max_length=64, blank=True)
    object_repr = models.CharField(max_length=200, blank=True)
    at = models.DateTimeField(db_default=Now())
    changes = models.JSONField(default=dict, blank=True)
    source = models.CharField(max_length=8, default="api")  # "api" or "admin"
    path = models.CharField(max_length=500, blank=True)
    ip = models.GenericIPAddressField(null=True, blank=True)

    class Meta:
        db_table = "core_auditentry"  # the table predates the app
        verbose_name = "audit entry"
        verbose_name_plural = "audit log"
        ordering = ["-at", "-id"]
        indexes = [
            # The audit list (API and admin): newest first, keyset paging on (at, id).
            models.Index(fields=["-at", "-id"], name="core_audit_at_idx"),
            # The history of one object.
            models.Index(fields=["object_type", "object_id"], name="core_audit_object_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.actor_name or '-'} {self.action} {self.object_type}:{self.object_id}"
