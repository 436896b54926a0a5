from django.apps import AppConfig


class CoreConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "core"
    verbose_name = "Core"

    def ready(self) -> None:
        from core import demo, signals  # noqa: F401  (signals: connects receivers)

        demo.register(self.label, demo.seed)
