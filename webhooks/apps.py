"""Operators' webhook endpoints and the durable deliveries of events to them."""

from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "webhooks"
    verbose_name = "Webhooks"

    # Read at every scrape of /metrics (core.contributions).
    gauges = "webhooks.selectors.GAUGES"

    def ready(self) -> None:
        # tasks: registers the Celery tasks, which the services send by name.
        from webhooks import tasks  # noqa: F401
