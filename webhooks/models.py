"""Webhook endpoints and their deliveries (an outbox in PostgreSQL)."""

from django.db import models


class WebhookEndpoint(models.Model):
    """An operator's receiver of events (Standard Webhooks: signed JSON POSTs)."""

    url = models.URLField(max_length=500)
    description = models.CharField(max_length=200, blank=True)
    # Event names this endpoint receives (webhooks.services.EVENTS).
    events = models.JSONField(default=list)
    # "whsec_" + base64 of random bytes: shown once at creation through the API.
    secret = models.CharField(max_length=100, editable=False)
    active = models.BooleanField(default=True)
    # Failed attempts in a row; reset by any success. Past the setting the endpoint is disabled.
    consecutive_failures = models.PositiveIntegerField(default=0, editable=False)
    disabled_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "core_webhookendpoint"  # the table predates the app
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.url


class WebhookDeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed (gave up)"


class DeliveryAttempts(models.Model):
    """What a durable delivery keeps of its attempts (webhooks, and pushes that
    wait for a retry): ``webhooks.services`` relays the due ones and retries them."""

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
        db_table = "core_webhookdelivery"  # the table predates the app
        ordering = ["-created_at", "-id"]
        indexes = [
            # The relay: pending rows that are due, oldest first.
            models.Index(
                fields=["next_attempt_at"], condition=models.Q(status="pending"), name="webhook_delivery_due_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event} -> {self.endpoint_id} ({self.status})"
