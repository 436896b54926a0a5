"""Reading a request's input with the API's error rules: common query parameters and the JSON body."""

import hashlib
import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.conf import settings
from rest_framework import serializers
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from core.api.errors import ValidationFailed
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


def _has_lone_surrogate(value: Any) -> bool:
    # Iterative walk: a deeply nested document must not hit the recursion limit.
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


class StrictJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError as exc:
            # json gives up on deep nesting ("[[[[...") with RecursionError, not ValueError.
            raise ParseError("JSON parse error - the body is nested too deeply.") from exc
        if _has_lone_surrogate(data):
            raise ParseError("JSON parse error - the body holds a lone surrogate (\\ud800-\\udfff), which is not text.")
        return data
