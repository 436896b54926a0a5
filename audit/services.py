"""Writes of the audit log: one entry per object an operator's write touched."""

import datetime
import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any
from uuid import UUID

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.files import File
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Model, QuerySet
from django.utils import timezone

from audit.models import AuditEntry

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
