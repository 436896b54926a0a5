from django.apps import AppConfig


class MessagecenterConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "messagecenter"
    verbose_name = "Message centre"

    # What the app gives the layers below it, which name no app (core.contributions).
    demo_seed = "messagecenter.demo.seed"
    rebuild_step = "messagecenter.services.rebuild.REBUILD_STEP"
    drift_checks = "messagecenter.drift.CHECKS"
    reader_sources = "messagecenter.insight.READER_SOURCES"
    gauges = "messagecenter.services.delivery.GAUGES"
    preferred_language = "messagecenter.languages.user_language"
    projections = "messagecenter.projection.PROJECTIONS"
    outbox_handlers = ("messagecenter.projection.OUTBOX_HANDLERS", "messagecenter.fill.OUTBOX_HANDLERS")

    def ready(self) -> None:
        # tasks: registers the Celery tasks, which the services send by name
        # (the tasks import the services; the services do not import them back).
        from messagecenter import live_api, signals, tasks  # noqa: F401
        from messagecenter.services import delivery, messages, notifications
        from messagecenter.services.channels import plan as channels_plan
        from messagecenter.services.channels import push as channels_push

        signals.connect()
        for task, (job, chunked) in {**messages.DELIVERY_JOBS, **notifications.DELIVERY_JOBS}.items():
            delivery.register(task, job, chunked=chunked)
        delivery.register(channels_plan.PUSH_CHUNK_TASK, channels_push.channel_push_chunk_job, chunked=True)
