from django.apps import AppConfig


class NoticesConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "notices"
    verbose_name = "Announcements"

    def ready(self) -> None:
        from core import outbox
        from notices import projection, services, signals  # noqa: F401  (signals: connects receivers)

        projection.register()
        outbox.register(projection.PLATFORM_SYNC_TOPIC, projection.replay_platform_sync)
        outbox.register(services.READ_TOPIC, services.replay_mark)
