"""What operators see of use and of the system: activity bitmaps, read-rate reports,
Prometheus metrics, the Redis check runs."""

from django.apps import AppConfig


class InsightConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "insight"
    verbose_name = "Insight"

    def ready(self) -> None:
        from durability import healing, rebuild
        from insight import activity

        # A rebuilt Redis has no activity bits of today: mark users again.
        healing.connect(heal=rebuild.heal, on_ready=activity.forget_marked)
