"""Operators' webhook endpoints and the durable deliveries of events to them."""

from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "webhooks"
    verbose_name = "Webhooks"

    def ready(self) -> None:
        # tasks: registers the Celery tasks, which the services send by name.
        from insight import metrics
        from webhooks import selectors, tasks  # noqa: F401

        metrics.register_state(
            "messagecenter_webhook_pending", "Webhook deliveries not finished yet.", selectors.pending_count
        )
        metrics.register_state(
            "messagecenter_webhook_oldest_pending_age_seconds",
            "Age of the oldest unfinished webhook delivery.",
            selectors.oldest_pending_age,
        )
