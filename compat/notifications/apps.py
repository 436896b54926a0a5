from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class Config(AppConfig):
    """The app; named as the incumbent named it, so `"notifications.apps.Config"` in INSTALLED_APPS keeps working."""

    name = "notifications"
    label = "notifications"
    verbose_name = _("Notifications")
    # The incumbent's ids are 32-bit: its table keeps them.
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        from notifications import checks, receivers

        receivers.connect()
        checks.register()
