"""Live updates: the per-process SSE hub, user channels and scheduled broadcasts."""

from django.apps import AppConfig


class LiveConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "live"
    verbose_name = "Live"
