"""Write use cases of the notifications app (``<entity>_<verb>``, keyword-only)."""

from notifications.services.inbox import (
    inbox_deliver,
    inbox_pull,
    inbox_push,
    inbox_push_on_commit,
    inbox_sync,
    unread_count_forget,
    unread_count_key,
)
from notifications.services.sending import notification_send, recipients_resolve

__all__ = [
    "inbox_deliver",
    "inbox_pull",
    "inbox_push",
    "inbox_push_on_commit",
    "inbox_sync",
    "notification_send",
    "recipients_resolve",
    "unread_count_forget",
    "unread_count_key",
]
