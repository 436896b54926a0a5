from django.conf import settings
from django.db import models
from django.db.models.functions import Now


class Platform(models.TextChoices):
    """The "ends" (operator, user, customer) announcements target: each user belongs to one or more
    of them, and read state is kept per end."""

    OPERATOR = "operator", "Operator"
    USER = "user", "User"
    CUSTOMER = "customer", "Customer"


class ApiToken(models.Model):
    """An API token of one sign-in (core/tokens.py). Only the SHA-256 digest of
    the token is kept: a database backup or a read-only leak of this table
    gives no one API access."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    digest = models.CharField(max_length=64, unique=True, editable=False)  # the lookup: its unique index
    # A fingerprint of the password hash the token was issued under: a token
    # stops answering once the password changed, whichever way it changed.
    password_mark = models.CharField(max_length=16, editable=False)
    created_at = models.DateTimeField(editable=False)
    expires_at = models.DateTimeField()
    # Written when authentication reads the token from PostgreSQL (at most
    # once per cache lifetime), not on every request.
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        verbose_name = "API token"
        indexes = [
            # tokens_of(): a user's tokens, newest first.
            models.Index(fields=["user", "-created_at"], name="core_apitoken_user_idx"),
        ]

    def __str__(self) -> str:
        return f"API token {self.pk} of user {self.user_id}"


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
    The Redis half of a user's marks carries ``user_id`` (the mark itself is
    committed already): a user's later marks queue behind it.
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
            # A user's mark: are older writes of theirs still waiting for Redis?
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


class ReadModelState(models.Model):
    """The one row (pk 1) describing the Redis read model as a whole (``core.healing``).

    ``generation`` moves on at the end of every full rebuild; the same number
    goes into Redis (``keys.readmodel_generation``), so a Redis without it
    (lost data) or with another one (a stale replica) is told apart from the
    one PostgreSQL last filled. The other fields show a rebuild's progress.
    """

    generation = models.BigIntegerField(default=0)
    rebuilding = models.BooleanField(default=False)
    stage = models.CharField(max_length=64, blank=True)
    done = models.BigIntegerField(default=0)
    total = models.BigIntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    last_seconds = models.FloatField(null=True, blank=True)
    last_error = models.TextField(blank=True)

    def __str__(self) -> str:
        return f"read model generation {self.generation}"


class AuditEntry(models.Model):
    """One operator write (through the manage API or Django admin).

    Written in the transaction of the write itself (``core.services.audit_record``),
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


class WebhookEndpoint(models.Model):
    """An operator's receiver of events (Standard Webhooks: signed JSON POSTs)."""

    url = models.URLField(max_length=500)
    description = models.CharField(max_length=200, blank=True)
    # Event names this endpoint receives (core.webhooks.EVENTS).
    events = models.JSONField(default=list)
    # "whsec_" + base64 of random bytes: shown once at creation through the API.
    secret = models.CharField(max_length=100, editable=False)
    active = models.BooleanField(default=True)
    # Failed attempts in a row; reset by any success. Past the setting the endpoint is disabled.
    consecutive_failures = models.PositiveIntegerField(default=0, editable=False)
    disabled_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.url


class WebhookDeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed (gave up)"


class DeliveryAttempts(models.Model):
    """What a durable delivery keeps of its attempts (webhooks, and pushes that
    wait for a retry): ``core.webhooks`` relays the due ones and retries them."""

    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True


class WebhookDelivery(DeliveryAttempts):
    """One event for one endpoint: written in the transaction of the event itself
    (an outbox), handed to Celery after commit, retried until it succeeds or
    runs out of attempts."""

    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=64)
    # The webhook-id header: the same on every attempt, so receivers can drop duplicates.
    message_id = models.CharField(max_length=64, unique=True)
    payload = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=WebhookDeliveryStatus.choices, default="pending")

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # The relay: pending rows that are due, oldest first.
            models.Index(
                fields=["next_attempt_at"], condition=models.Q(status="pending"), name="webhook_delivery_due_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event} -> {self.endpoint_id} ({self.status})"
