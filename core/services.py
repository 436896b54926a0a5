"""Write use cases of the core app."""

import datetime
import json
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any
from uuid import UUID

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.core.files import File
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.db.models import Model, QuerySet
from django.utils import timezone

from core.models import AuditEntry, UserPlatform
from core.platforms import clean_platforms, default_platforms
from core.selectors import PLATFORMS_ATTR


def user_set_platforms(*, user: User, platforms: Iterable[str]) -> list[str]:
    """Replace the user's platforms; returns them in canonical order.

    A user is always on at least one platform. The Redis cache of the user's
    platforms is dropped after commit by the signal receivers.
    """
    wanted = clean_platforms(platforms, empty_message="A user must be on at least one platform.")
    with transaction.atomic():
        current = set(UserPlatform.objects.filter(user=user).values_list("platform", flat=True))
        removed = current - set(wanted)
        if removed:
            for membership in UserPlatform.objects.filter(user=user, platform__in=removed):
                membership.delete()  # one by one, so post_delete receivers see each
        for platform in wanted:
            if platform not in current:
                UserPlatform.objects.create(user=user, platform=platform)
    setattr(user, PLATFORMS_ATTR, tuple(wanted))  # the caller's object sees its own change
    return wanted


def user_ensure_default_platform(*, user: User) -> None:
    """Give a new user the default platform (operator for staff, user otherwise)."""
    if not UserPlatform.objects.filter(user=user).exists():
        for platform in default_platforms(is_staff=bool(getattr(user, "is_staff", False))):
            UserPlatform.objects.get_or_create(user=user, platform=platform)


# Long values (rich HTML bodies, id lists) are cut in the log: it records what
# changed, the row itself keeps the whole value.
_AUDIT_VALUE_MAX = 1000
_AUDIT_LIST_MAX = 200
# A value under a name like these is a credential: the log says it was given
# or changed, never what it is (the log is read by more people than the row).
_AUDIT_SECRET_WORDS = ("secret", "password", "token")
_AUDIT_SECRET_NAMES = frozenset({"key"})  # an API token's own field
AUDIT_MASK = "[masked]"
# Values the JSON encoder of audit_record writes as they are (times as ISO strings).
_AUDIT_PLAIN = (str, int, float, bool, type(None), datetime.date, datetime.time, datetime.timedelta, Decimal, UUID)


def _audit_secret(name: str) -> bool:
    lowered = name.lower()
    return lowered in _AUDIT_SECRET_NAMES or any(word in lowered for word in _AUDIT_SECRET_WORDS)


def _audit_value(value: Any) -> Any:  # noqa: PLR0911  one early answer per kind of value, a flat type switch
    # One cleaning for every source (API input, admin form values): names that
    # hold a secret are masked, rows become their ids, long values are cut.
    if isinstance(value, str):
        return value if len(value) <= _AUDIT_VALUE_MAX else value[:_AUDIT_VALUE_MAX] + "…"
    if isinstance(value, Model):
        return value.pk
    if isinstance(value, Mapping):
        return {str(key): AUDIT_MASK if _audit_secret(str(key)) else _audit_value(item) for key, item in value.items()}
    if isinstance(value, QuerySet):
        return [_audit_value(item) for item in value[:_AUDIT_LIST_MAX]]
    if isinstance(value, list | tuple | set | frozenset):
        items = list(value)
        return [_audit_value(item) for item in items[:_AUDIT_LIST_MAX]]
    if isinstance(value, File):
        return _audit_value(value.name or "")
    if isinstance(value, _AUDIT_PLAIN):
        return value
    return _audit_value(str(value))


def audit_record(
    *,
    actor: AbstractBaseUser | AnonymousUser | None,
    action: str,
    object_type: str,
    object_id: Any,
    object_repr: str = "",
    changes: Mapping[str, Any] | None = None,
    source: str = "api",
    path: str = "",
    ip: str | None = None,
) -> AuditEntry:
    """Write one audit entry for an operator write.

    Call it inside the write's own transaction: the entry commits or rolls back
    with the write (``audit_record`` opens no transaction of its own). ``changes``
    is made JSON-safe (times as ISO strings, rows as their ids, long values
    cut) and values under a secret's name (secret, password, token) are masked.
    """
    user = actor if actor is not None and actor.is_authenticated else None
    safe = json.loads(json.dumps(_audit_value(dict(changes or {})), cls=DjangoJSONEncoder))
    return AuditEntry.objects.create(
        actor=user,  # type: ignore[misc]
        actor_name=(user.get_username() if user is not None else "")[:150],
        action=action[:64],
        object_type=object_type[:100],
        object_id="" if object_id is None else str(object_id)[:64],
        object_repr=object_repr[:200],
        at=timezone.now(),
        changes=safe,
        source=source,
        path=path[:500],
        ip=ip or None,
    )
