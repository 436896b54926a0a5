"""Celery adapters of the webhooks app (the task names predate the app: queued tasks still run)."""

from celery import shared_task

from webhooks import services as webhooks


@shared_task(name="core.webhook_deliver")
def webhook_deliver_task(delivery_id: int) -> str:
    """One attempt of a webhook delivery; a failure leaves the row due after its
    backoff for the relay (no Celery retry: the row is the retry)."""
    return webhooks.webhook_deliver(delivery_id=delivery_id)


@shared_task(name="core.webhook_relay")
def webhook_relay_task() -> int:
    """Periodic (Celery beat, every WEBHOOK_RELAY_SECONDS): hand due webhook
    deliveries (retries, refused hand-overs) to the workers."""
    return webhooks.webhook_relay()
