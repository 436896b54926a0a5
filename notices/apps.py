from django.apps import AppConfig


class NoticesConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "notices"
    verbose_name = "Announcements"

    def ready(self) -> None:
        from notices import signals  # noqa: F401  (connects receivers)
