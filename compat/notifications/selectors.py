"""Read use cases: what the views, the live endpoints and the template tags
show of a user's notifications. Callers sync the user first
(``services.inbox_sync``) so that the inbox's marks are in."""

from typing import Any

from django.core.cache import cache
from django.forms import model_to_dict

from notifications.models import Notification
from notifications.services import unread_count_key
from notifications.settings import get_config, soft_delete
from notifications.utils import id2slug


def notification_unread_count(*, user: Any) -> int:
    return int(user.notifications.unread().count())


def notification_unread_count_cached(*, user: Any) -> int:
    """The unread count, kept CACHE_TIMEOUT seconds per user (every change of
    the user's notifications drops it)."""
    timeout = get_config()["CACHE_TIMEOUT"]
    count = cache.get_or_set(unread_count_key(user.pk), lambda: notification_unread_count(user=user), timeout)
    # None: the cache is down (it answers nothing then): count in PostgreSQL.
    return int(count) if count is not None else notification_unread_count(user=user)


def notification_has_unread(*, user: Any) -> bool:
    return bool(user.notifications.unread().exists())


def notification_page_list(*, user: Any, unread_only: bool) -> Any:
    """The rows of the list pages: unread ones, or all (the active ones with SOFT_DELETE)."""
    if unread_only:
        return user.notifications.unread()
    return user.notifications.active() if soft_delete() else user.notifications.all()


def notification_struct(notification: Notification) -> dict[str, Any]:
    """A row as the live list endpoints show it: its fields, its slug, and the
    text of its actor, target and action object."""
    struct: dict[str, Any] = model_to_dict(notification)
    struct["slug"] = id2slug(notification.pk)
    for name in ("actor", "target", "action_object"):
        obj = getattr(notification, name)
        if obj:
            struct[name] = str(obj)
    if notification.data:
        struct["data"] = notification.data
    return struct
