"""Reads of the webhooks app: the deliveries still pending (the metrics read them at a scrape)."""

from django.utils import timezone

from insight.metrics import State
from webhooks.models import WebhookDelivery


def pending_count() -> float:
    return float(WebhookDelivery.objects.filter(status="pending").count())


def oldest_pending_age() -> float:
    oldest = (
        WebhookDelivery.objects.filter(status="pending").order_by("created_at").values_list("created_at", flat=True)[:1]
    )
    return max((timezone.now() - oldest[0]).total_seconds(), 0.0) if oldest else 0.0


# Read at every scrape of /metrics (the app's AppConfig names them).
GAUGES = (
    State("messagecenter_webhook_pending", "Webhook deliveries not finished yet.", pending_count),
    State(
        "messagecenter_webhook_oldest_pending_age_seconds",
        "Age of the oldest unfinished webhook delivery.",
        oldest_pending_age,
    ),
)
