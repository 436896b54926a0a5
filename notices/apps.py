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

    def ready(self) -> None:
        from durability import outbox
        from notices import apis, projection, services, signals  # noqa: F401  (signals: connects receivers)

        projection.register()
        outbox.register(projection.PLATFORM_SYNC_TOPIC, projection.replay_platform_sync)
        outbox.register(projection.SUMMARY_TOPIC, projection.replay_summary_drop)
        outbox.register(services.READ_TOPIC, services.replay_mark)
