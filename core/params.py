"""Parsing of common query parameters, with the API's error rules."""

from datetime import UTC, datetime

from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from core.exceptions import ValidationFailed


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
    try:
        value = parse_datetime(raw.replace(" ", "+") if "T" in raw and " " in raw else raw)
    except ValueError:
        value = None
    if value is None:
        raise ValidationFailed(
            f"{name} must be an ISO 8601 time.", code="invalid_time", fields={name: ["Must be an ISO 8601 time."]}
        )
    if timezone.is_naive(value):
        value = timezone.make_aware(value, UTC)
    return value


def parse_bool(raw: str | None, *, name: str) -> bool:
    if raw is None or raw == "":
        return False
    lowered = raw.lower()
    if lowered in {"true", "1", "yes"}:
        return True
    if lowered in {"false", "0", "no"}:
        return False
    raise ValidationFailed(f"{name} must be true or false.", fields={name: ["Must be true or false."]})
