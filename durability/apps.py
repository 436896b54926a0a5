from django.apps import AppConfig


class DurabilityConfig(AppConfig):
    """What keeps the Redis read model in step with PostgreSQL through faults: the
    projection after commit and the outbox when Redis refuses it, the generation
    marker and its healer, the rebuild, the drift check and ``/healthz``."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "durability"
    verbose_name = "Read model durability"
    outbox_handlers = "durability.projection.OUTBOX_HANDLERS"

    def ready(self) -> None:
        from durability import healing, outbox, rebuild

        # The healer thread rebuilds through durability.rebuild; a read model back
        # in order makes the outbox look for pending marks afresh.
        healing.connect(heal=rebuild.heal, on_ready=outbox.forget_local_state)
