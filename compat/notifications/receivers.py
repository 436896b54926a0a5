"""Signal receivers: adapters that turn a signal into a service call.

Connected in ``notifications.apps.Config.ready()``. ``notify_handler`` answers
``notify.send``; the others hand every committed change of a user's read or
deleted flags to the inbox (``services.inbox_push_on_commit``), whoever made
it: instance saves and deletes, and the queryset's UPDATEs (``marks_changed``).
"""

from typing import Any

from django.db.models.signals import post_delete, post_init, post_save

from durability.projection import LoadedValues
from notifications import services
from notifications.models import Notification
from notifications.signals import marks_changed, notify

_OPTIONS = (
    "recipient",
    "verb",
    "action_object",
    "target",
    "description",
    "level",
    "public",
    "timestamp",
    "actor_for_concrete_model",
    "action_object_for_concrete_model",
    "target_for_concrete_model",
)
_flags = LoadedValues(("unread", "deleted"))


def notify_handler(verb: str, **kwargs: Any) -> list[Notification]:
    """``notify.send(actor, recipient=..., verb=..., **options)``: the signal's
    sender is the actor; options it does not name are the extra data."""
    kwargs.pop("signal", None)
    actor = kwargs.pop("sender")
    named = {name: kwargs.pop(name) for name in _OPTIONS if name in kwargs}
    if "recipient" not in named:
        raise TypeError("notify.send() needs a recipient.")
    return services.notification_send(actor=actor, verb=verb, extra=kwargs, **named)


def on_notification_init(sender: Any, instance: Notification, **kwargs: Any) -> None:
    if instance.pk is not None:  # loaded from a row (a new one has nothing to compare with)
        _flags.remember(instance)


def on_notification_saved(sender: Any, instance: Notification, created: bool, raw: bool = False, **kwargs: Any) -> None:
    before = _flags.get(instance)
    _flags.remember(instance)
    # A new row has no inbox item yet (a send links its rows itself); a save
    # that left both flags as loaded has nothing to tell.
    if raw or created or (before is not None and before == _flags.of(instance)):
        return
    services.inbox_push_on_commit(user_ids=[instance.recipient_id])


def on_notification_deleted(sender: Any, instance: Notification, **kwargs: Any) -> None:
    # The row's link stays behind it: the push deletes the inbox item too.
    services.inbox_push_on_commit(user_ids=[instance.recipient_id])


def on_marks_changed(sender: Any, recipient_ids: list[int], **kwargs: Any) -> None:
    services.inbox_push_on_commit(user_ids=recipient_ids)


def connect() -> None:
    # The incumbent's dispatch_uid: a site that disconnected the handler by it still can.
    notify.connect(notify_handler, dispatch_uid="notifications.models.notification")
    post_init.connect(on_notification_init, sender=Notification, dispatch_uid="notifications_row_init")
    post_save.connect(on_notification_saved, sender=Notification, dispatch_uid="notifications_row_saved")
    post_delete.connect(on_notification_deleted, sender=Notification, dispatch_uid="notifications_row_deleted")
    marks_changed.connect(on_marks_changed, sender=Notification, dispatch_uid="notifications_marks_changed")
