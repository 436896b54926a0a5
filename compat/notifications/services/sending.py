"""``notify.send``: one notification row per recipient, as the incumbent
wrote them, and one message in the message centre for the whole send."""

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, Group
from django.contrib.contenttypes.models import ContentType
from django.db import models, transaction
from django.utils import timezone

from notifications.abstract import Level
from notifications.models import Notification
from notifications.services.inbox import inbox_deliver
from notifications.settings import get_config


def recipients_resolve(recipient: Any) -> list[AbstractBaseUser]:
    """A user, a ``Group`` (its members now), or a queryset or list of users."""
    if isinstance(recipient, Group):
        return list(recipient.user_set.all())
    if isinstance(recipient, models.QuerySet | list | tuple | set | frozenset):
        return list(recipient)
    return [recipient]


def _columns_and_data(extra: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Split notify.send's extra keyword arguments: those naming a column of the
    model set it (a subclass's own fields), the rest is ``data``. Without
    USE_JSONFIELD they are dropped, as the incumbent did."""
    if not extra or not get_config()["USE_JSONFIELD"]:
        return {}, None
    columns = {f.name for f in Notification._meta.concrete_fields} | {
        f.attname for f in Notification._meta.concrete_fields
    }
    return {k: v for k, v in extra.items() if k in columns}, {k: v for k, v in extra.items() if k not in columns}


def _content_type(obj: models.Model, *, concrete: bool) -> ContentType:
    return ContentType.objects.get_for_model(obj, for_concrete_model=concrete)


def notification_send(  # noqa: PLR0913  django-notifications-hq's notify.send keyword arguments, one to one
    *,
    actor: models.Model,
    recipient: Any,
    verb: str,
    action_object: models.Model | None = None,
    target: models.Model | None = None,
    description: str | None = None,
    level: str = Level.info,
    public: bool = True,
    timestamp: datetime | None = None,
    actor_for_concrete_model: bool = True,
    action_object_for_concrete_model: bool = True,
    target_for_concrete_model: bool = True,
    extra: Mapping[str, Any] | None = None,
) -> list[Notification]:
    """Store one notification per recipient and deliver the send into the
    message centre as one message (``services.inbox.inbox_deliver``).

    Every row of one send shares its timestamp (the import command relies on
    it to tell sends apart). Rows are saved one by one, so ``post_save``
    receivers of a site run for each as they did; all in one transaction.
    Returns the rows, in recipient order.
    """
    users: Iterable[Any] = recipients_resolve(recipient)
    columns, data = _columns_and_data(extra or {})
    timestamp = timestamp if timestamp is not None else timezone.now()
    actor_type = _content_type(actor, concrete=actor_for_concrete_model)
    optional = [
        ("target", target, target_for_concrete_model),
        ("action_object", action_object, action_object_for_concrete_model),
    ]
    rows: list[Notification] = []
    with transaction.atomic():
        for user in users:
            row = Notification(
                recipient=user,
                actor_content_type=actor_type,
                actor_object_id=actor.pk,
                verb=str(verb),
                public=bool(public),
                description=description,
                timestamp=timestamp,
                level=level,
            )
            for name, obj, concrete in optional:
                if obj is not None:
                    setattr(row, f"{name}_object_id", obj.pk)
                    setattr(row, f"{name}_content_type", _content_type(obj, concrete=concrete))
            for name, value in columns.items():
                setattr(row, name, value)
            if data is not None:
                row.data = dict(data)
            row.save()
            rows.append(row)
        inbox_deliver(notifications=rows, actor=actor, action_object=action_object, target=target)
    return rows
