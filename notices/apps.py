from django.apps import AppConfig


class NoticesConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "notices"
    verbose_name = "Announcements"

    def ready(self) -> None:
        # Core names no app: this app hands it what it contributes (outbox
        # handlers, drift checks, the rebuild, demo data).
        from core import demo
        from durability import drift, outbox, rebuild
        from insight import activity
        from notices import apis, insight, projection, services, signals  # noqa: F401  (signals: connects receivers)
        from notices import demo as notices_demo
        from notices import drift as notices_drift
        from notices.rebuild import announcements_rebuild

        projection.register()
        outbox.register(projection.PLATFORM_SYNC_TOPIC, projection.replay_platform_sync)
        outbox.register(projection.SUMMARY_TOPIC, projection.replay_summary_drop)
        outbox.register(services.READ_TOPIC, services.replay_mark)
        drift.register(*notices_drift.CHECKS)
        rebuild.register_rebuild("notices", lambda progress: announcements_rebuild(progress=progress), order=10)
        demo.register(self.label, notices_demo.seed)
        activity.register_reader_source(
            activity.ReaderSource(
                kind="announcement",
                label="Announcement",
                exists=insight.announcement_exists,
                first_reads=insight.announcement_first_reads,
                readers=insight.announcement_readers,
            )
        )
