"""System checks of the inbox delivery settings: a typo fails at start-up,
not at the first notify.send."""

from typing import Any

from django.conf import settings
from django.core import checks

from messagecenter.models import CATEGORIES

KINDS = ("message",)


def inbox_settings_check(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    errors: list[checks.CheckMessage] = []
    category = getattr(settings, "NOTIFICATIONS_INBOX_CATEGORY", "interaction")
    if category not in CATEGORIES:
        errors.append(
            checks.Error(
                f"NOTIFICATIONS_INBOX_CATEGORY is {category!r}.",
                hint=f"Choose one of the inbox categories: {', '.join(CATEGORIES)}.",
                id="notifications.E001",
            )
        )
    kind = getattr(settings, "NOTIFICATIONS_INBOX_KIND", "message")
    if kind not in KINDS:
        errors.append(
            checks.Error(
                f"NOTIFICATIONS_INBOX_KIND is {kind!r}.",
                hint=(
                    "Only 'message' reaches a chosen set of users as one item: a typed "
                    "notification goes to the subscribers of its type and scope."
                ),
                id="notifications.E002",
            )
        )
    return errors


def register() -> None:
    checks.register(inbox_settings_check, "notifications")
