from django.apps import AppConfig


class MessagecenterConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "messagecenter"
    verbose_name = "Message centre"

    def ready(self) -> None:
        # Core names no app: this app hands it what it contributes (outbox
        # handlers, drift checks, the rebuild, demo data).
        from core import demo
        from core.api import translations
        from durability import drift, outbox, rebuild
        from insight import activity, metrics
        from messagecenter import demo as messagecenter_demo
        from messagecenter import drift as messagecenter_drift

        # tasks: registers the Celery tasks, which the services send by name
        # (the tasks import the services; the services do not import them back).
        from messagecenter import insight, languages, live_api, projection, signals, tasks  # noqa: F401
        from messagecenter.models import PushDelivery
        from messagecenter.services import delivery, inbox, messages, notifications
        from messagecenter.services.channels import plan as channels_plan
        from messagecenter.services.channels import push as channels_push
        from messagecenter.services.rebuild import inbox_rebuild

        projection.register()
        translations.preferred_language_source(languages.user_language)
        signals.connect()
        outbox.register(projection.MIRROR_TOPIC, projection.replay_mirror)
        for topic, handler in inbox.OUTBOX_HANDLERS.items():
            outbox.register(topic, handler)
        for task, (job, chunked) in {**messages.DELIVERY_JOBS, **notifications.DELIVERY_JOBS}.items():
            delivery.register(task, job, chunked=chunked)
        delivery.register(channels_plan.PUSH_CHUNK_TASK, channels_push.channel_push_chunk_job, chunked=True)
        drift.register(*messagecenter_drift.CHECKS)
        rebuild.register_rebuild("messagecenter", lambda progress: inbox_rebuild(progress=progress), order=20)
        demo.register(self.label, messagecenter_demo.seed)
        for kind, exists, first_reads, readers in (
            ("message", insight.message_exists, insight.message_first_reads, insight.message_readers),
            ("bulletin", insight.bulletin_exists, insight.bulletin_first_reads, insight.bulletin_readers),
        ):
            activity.register_reader_source(
                activity.ReaderSource(
                    kind=kind, label=kind.capitalize(), exists=exists, first_reads=first_reads, readers=readers
                )
            )
        metrics.register_state(
            "messagecenter_pending_deliveries",
            "Deliveries and fan-out chunks committed and not yet in Redis.",
            lambda: float(delivery.delivery_depth()),
        )
        metrics.register_state(
            "messagecenter_push_retries_pending",
            "Web pushes that failed and wait for another attempt.",
            lambda: float(PushDelivery.objects.filter(status="pending").count()),
        )
        metrics.register_state(
            "messagecenter_fanout_lag_seconds",
            "Age of the oldest pending delivery (0 when none): how far fan-out is behind.",
            delivery.delivery_oldest_age_seconds,
        )
