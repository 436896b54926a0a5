"""Parsing of common query parameters, with the API's error rules."""

import hashlib
import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.conf import settings
from rest_framework import serializers

from core.api.exceptions import ValidationFailed
from core.api.fields import TimeField, id_value


def parse_limit(raw: str | None) -> int:
    """``limit``: default page size, capped; non-positive or non-numeric is 400."""
    if raw is None or raw == "":
        return int(settings.MESSAGECENTER_PAGE_SIZE)
    try:
        value = int(raw)
    except (TypeError, ValueError):
        value = 0
    if value <= 0:
        raise ValidationFailed(
            "limit must be a positive integer.", code="invalid_limit", fields={"limit": ["Must be a positive integer."]}
        )
    return min(value, int(settings.MESSAGECENTER_MAX_PAGE_SIZE))


def parse_time(raw: str | None, *, name: str) -> datetime | None:
    """An ISO 8601 time (naive ones are taken as UTC); None when absent."""
    if raw is None or raw == "":
        return None
    # An unescaped "+" offset in a query string arrives as a space.
    text = raw.replace(" ", "+") if "T" in raw and " " in raw else raw
    try:
        return TimeField().run_validation(text)
    except serializers.ValidationError as exc:
        message = str(exc.detail[0]) if isinstance(exc.detail, list) and exc.detail else "Must be an ISO 8601 time."
        raise ValidationFailed(f"{name}: {message}", code="invalid_time", fields={name: [message]}) from exc


def parse_bool(raw: str | None, *, name: str) -> bool:
    if raw is None or raw == "":
        return False
    lowered = raw.lower()
    if lowered in {"true", "1", "yes"}:
        return True
    if lowered in {"false", "0", "no"}:
        return False
    raise ValidationFailed(f"{name} must be true or false.", fields={name: ["Must be true or false."]})


def parse_id(raw: str | None, *, name: str) -> int | None:
    """An id filter (``group=8``): the string form of an id; None when absent, 400 when malformed."""
    if raw is None or raw == "":
        return None
    value = id_value(raw)
    if value is None:
        raise ValidationFailed(
            f"{name} must be an id (a positive integer).", code="invalid_id", fields={name: ["Must be an id."]}
        )
    return value


def parse_choice(raw: str | None, *, name: str, choices: Iterable[str]) -> str | None:
    """A filter with a closed set of values; None when absent, 400 naming the choices otherwise."""
    if raw is None or raw == "":
        return None
    allowed = list(choices)
    if raw not in allowed:
        message = f"Must be one of: {', '.join(allowed)}."
        raise ValidationFailed(f"{name}: {message}", fields={name: [message]})
    return raw


def parse_text(raw: str | None, *, name: str, max_length: int = 200) -> str | None:
    """A free-text filter (a scope, a username); None when absent, 400 when too long."""
    if raw is None or raw == "":
        return None
    if len(raw) > max_length:
        message = f"At most {max_length} characters."
        raise ValidationFailed(f"{name}: {message}", fields={name: [message]})
    return raw


def page_scope(name: str, filters: Mapping[str, Any]) -> str:
    """The cursor scope of one list with its filters: a cursor from another list,
    or from the same list under other filters, is refused (400) rather than
    quietly paging a different result."""
    canonical = json.dumps({key: filters[key] for key in sorted(filters)}, default=str, sort_keys=True)
    return f"{name}:{hashlib.sha256(canonical.encode()).hexdigest()[:16]}"
