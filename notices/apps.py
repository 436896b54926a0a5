from django.apps import AppConfig


class NoticesConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "notices"
    verbose_name = "Announcements"

    def ready(self) -> None:
        from core import healing, outbox
        from notices import services, signals  # signals: connects receivers
        from notices.rebuild import announcements_rebuild

        outbox.register(signals.PLATFORM_SYNC_TOPIC, signals.replay_platform_sync)
        outbox.register(services.READ_TOPIC, services.replay_mark)
        healing.register_rebuild("notices", lambda progress: announcements_rebuild(progress=progress), order=10)
