from django.apps import AppConfig


class NoticesConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "notices"
    verbose_name = "Announcements"

    # What the app gives the layers below it, which name no app (core.contributions).
    demo_seed = "notices.demo.seed"
    rebuild_step = "notices.rebuild.REBUILD_STEP"
    drift_checks = "notices.drift.CHECKS"
    reader_sources = "notices.insight.READER_SOURCES"
    projections = "notices.projection.PROJECTIONS"
    outbox_handlers = ("notices.projection.OUTBOX_HANDLERS", "notices.services.OUTBOX_HANDLERS")

    def ready(self) -> None:
        from notices import apis, signals  # noqa: F401  (signals: connects receivers)
