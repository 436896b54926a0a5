from django.apps import AppConfig


class MessagecenterConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "messagecenter"
    verbose_name = "Message centre"

    def ready(self) -> None:
        from core import outbox
        from messagecenter import signals
        from messagecenter.services import inbox

        signals.connect()
        outbox.register(signals.MIRROR_TOPIC, signals.replay_mirror)
        for topic, handler in inbox.OUTBOX_HANDLERS.items():
            outbox.register(topic, handler)
