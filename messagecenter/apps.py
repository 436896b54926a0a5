from django.apps import AppConfig


class MessagecenterConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "messagecenter"
    verbose_name = "Message centre"

    def ready(self) -> None:
        from core import healing, outbox
        from messagecenter import signals
        from messagecenter.services import inbox
        from messagecenter.services.rebuild import inbox_rebuild

        signals.connect()
        outbox.register(signals.MIRROR_TOPIC, signals.replay_mirror)
        for topic, handler in inbox.OUTBOX_HANDLERS.items():
            outbox.register(topic, handler)
        healing.register_rebuild("messagecenter", lambda progress: inbox_rebuild(progress=progress), order=20)
