"""Who is calling: API tokens and sign-in, users' platforms (ends), the user admin."""

from django.apps import AppConfig


class AccountsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "accounts"
    verbose_name = "Accounts"

    def ready(self) -> None:
        from accounts import demo as accounts_demo
        from accounts import signals, tasks  # noqa: F401  (register)
        from core import demo

        # The operator and the users come first (INSTALLED_APPS order): the apps' items address them.
        demo.register(self.label, accounts_demo.seed)
