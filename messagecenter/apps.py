from django.apps import AppConfig


class MessagecenterConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "messagecenter"
    verbose_name = "Message centre"

    def ready(self) -> None:
        from core import outbox
        from messagecenter import projection, signals
        from messagecenter.services import inbox

        projection.register()
        signals.connect()
        outbox.register(projection.MIRROR_TOPIC, projection.replay_mirror)
        for topic, handler in inbox.OUTBOX_HANDLERS.items():
            outbox.register(topic, handler)
