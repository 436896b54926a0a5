"""Who is calling: API tokens and sign-in, users' platforms (ends), the user admin."""

from django.apps import AppConfig


class AccountsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "accounts"
    verbose_name = "Accounts"

    # The operator and the users, seeded first (INSTALLED_APPS order): the
    # other apps' demo items address them (core.contributions).
    demo_seed = "accounts.demo.seed"

    def ready(self) -> None:
        from accounts import signals, tasks  # noqa: F401  (register)
