from django.apps import AppConfig


class CoreConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "core"
    verbose_name = "Core"

    def ready(self) -> None:
        from django.urls import register_converter

        from core import contributions  # noqa: F401  (registers its system check)
        from core.api import lookups  # noqa: F401  (registers)
        from core.api.fields import IdConverter

        # Registered before any URLconf is imported: every app's id paths use it.
        register_converter(IdConverter, "id")
