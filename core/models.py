from django.conf import settings
from django.db import models


class Platform(models.TextChoices):
    """The "ends" of seed 000: each user belongs to one or more of them."""

    OPERATOR = "operator", "Operator"
    USER = "user", "User"
    CUSTOMER = "customer", "Customer"


class UserPlatform(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="platform_memberships")
    platform = models.CharField(max_length=16, choices=Platform.choices)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "platform"], name="userplatform_unique"),
        ]
        indexes = [
            # platform_user_counts(): users per platform for read ratios.
            models.Index(fields=["platform", "user"], name="userplatform_platform_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id}@{self.platform}"


class OutboxEntry(models.Model):
    """A read-model write that could not reach Redis after PostgreSQL committed.

    Replayed in id order (``core.outbox``) once Redis answers again; every
    handler is idempotent, so a replay that dies half-way is simply run again.
    Marks accepted while Redis is down carry ``user_id``: degraded reads lay
    the user's pending marks over the last read-state snapshot.
    """

    topic = models.CharField(max_length=64)
    payload = models.JSONField(default=dict)
    user_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            # Degraded reads: one user's pending marks, in order.
            models.Index(fields=["user_id", "id"], condition=models.Q(user_id__isnull=False), name="outbox_user_idx"),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.topic}"


class RedisCheckRun(models.Model):
    """One run of ``check_redis`` (by hand or by the beat job): what drifted, what was mended."""

    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    repair = models.BooleanField(default=False)
    drift_count = models.PositiveIntegerField(default=0)
    repaired_count = models.PositiveIntegerField(default=0)
    # [{"area": "announcements", "key": "...", "detail": "..."}, ...]
    findings = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [
            # The admin's "last result" and the run history, newest first.
            models.Index(fields=["-started_at"], name="redischeckrun_started_idx"),
        ]

    def __str__(self) -> str:
        return f"check {self.started_at:%Y-%m-%d %H:%M:%S}: {self.drift_count} drift"
