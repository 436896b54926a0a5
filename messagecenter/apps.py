from django.apps import AppConfig


class MessagecenterConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "messagecenter"
    verbose_name = "Message centre"

    def ready(self) -> None:
        from messagecenter import signals

        signals.connect()
