from django.apps import AppConfig


class MessagecenterConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "messagecenter"
    verbose_name = "Message centre"

    def ready(self) -> None:
        from core import outbox

        # tasks: registers the Celery tasks, which the services send by name
        # (the tasks import the services; the services do not import them back).
        from messagecenter import projection, signals, tasks  # noqa: F401
        from messagecenter.services import inbox

        projection.register()
        signals.connect()
        outbox.register(projection.MIRROR_TOPIC, projection.replay_mirror)
        for topic, handler in inbox.OUTBOX_HANDLERS.items():
            outbox.register(topic, handler)
