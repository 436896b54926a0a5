"""The incumbent's helpers of the live list endpoints, by their old names."""

from typing import Any

from django.http import HttpRequest

from notifications.selectors import notification_struct
from notifications.settings import get_config

MAX_TO_FETCH = 100


def get_num_to_fetch(request: HttpRequest) -> int:
    """``?max=``: 1 to 100, else NUM_TO_FETCH."""
    default = int(get_config()["NUM_TO_FETCH"])
    try:
        wanted = int(request.GET.get("max", default))
    except ValueError:
        return default
    return wanted if 1 <= wanted <= MAX_TO_FETCH else default


def get_notification_list(request: HttpRequest, method_name: str = "all") -> list[dict[str, Any]]:
    """The newest ``max`` of the user's notifications (``method_name``: "all" or
    "unread"); with ``?mark_as_read=`` set, those listed are marked read."""
    rows = getattr(request.user.notifications, method_name)()[: get_num_to_fetch(request)]  # type: ignore[union-attr]
    listed = []
    for notification in rows:
        listed.append(notification_struct(notification))
        if request.GET.get("mark_as_read"):
            notification.mark_as_read()
    return listed
