"""The incumbent's import path for the abstract model, its queryset and the
``notify`` handler (``from notifications.base.models import notify_handler``)."""

from notifications.abstract import AbstractNotification, NotificationQuerySet, assert_soft_delete, is_soft_delete
from notifications.receivers import notify_handler

__all__ = ["AbstractNotification", "NotificationQuerySet", "assert_soft_delete", "is_soft_delete", "notify_handler"]
