"""``DJANGO_NOTIFICATIONS_CONFIG``, read on every call (so ``override_settings``
applies at once), over the incumbent's defaults."""

from typing import Any

from django.conf import settings

CONFIG_DEFAULTS: dict[str, Any] = {
    "PAGINATE_BY": 20,
    # Extra keyword arguments of notify.send go to ``data`` only when this is on.
    "USE_JSONFIELD": False,
    # Deleting flags the row (``deleted``) instead of removing it.
    "SOFT_DELETE": False,
    # Default ``max`` of the live list endpoints.
    "NUM_TO_FETCH": 10,
    # Seconds the template tags keep a user's unread count.
    "CACHE_TIMEOUT": 2,
}


def get_config() -> dict[str, Any]:
    return {**CONFIG_DEFAULTS, **getattr(settings, "DJANGO_NOTIFICATIONS_CONFIG", {})}


def soft_delete() -> bool:
    return bool(get_config()["SOFT_DELETE"])
