from django.apps import AppConfig


class CoreConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "core"
    verbose_name = "Core"

    def ready(self) -> None:
        from django.urls import register_converter

        from core import healing, outbox, rebuild
        from core.api import lookups  # noqa: F401  (registers)
        from core.api.converters import IdConverter

        # Registered before any URLconf is imported: every app's id paths use it.
        register_converter(IdConverter, "id")
        # The healer thread rebuilds through core.rebuild; a read model back in
        # order makes the outbox look for pending marks afresh.
        healing.connect(heal=rebuild.heal, on_ready=outbox.forget_local_state)
