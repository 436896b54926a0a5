"""Parsing of common query parameters, with the API's error rules."""

from datetime import datetime

from django.conf import settings
from rest_framework import serializers

from core.exceptions import ValidationFailed
from core.fields import TimeField


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
