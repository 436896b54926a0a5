"""Which platforms a user is on: the default rule, in one place."""

from collections.abc import Iterable
from typing import Any

from accounts.models import Platform
from core.api.errors import ValidationFailed

ALL_PLATFORMS: tuple[str, ...] = tuple(Platform.values)


def default_platforms(*, is_staff: bool) -> list[str]:
    """Staff users are operators by default, everyone else a plain user."""
    return [Platform.OPERATOR.value] if is_staff else [Platform.USER.value]


def clean_platforms(platforms: Any, *, empty_message: str) -> list[str]:
    """Validate a list of platform names: de-duplicated, in canonical order, never empty."""
    if isinstance(platforms, str) or not isinstance(platforms, Iterable):
        raise ValidationFailed("platforms must be a list.", fields={"platforms": ["Must be a list of platforms."]})
    items = list(platforms)
    if not all(isinstance(p, str) for p in items):
        raise ValidationFailed("platforms must be names.", fields={"platforms": ["Must be a list of platforms."]})
    unknown = [p for p in dict.fromkeys(items) if p not in ALL_PLATFORMS]
    if unknown:
        raise ValidationFailed(
            f"Unknown platform(s): {', '.join(unknown)}.",
            fields={"platforms": [f"Choose from {', '.join(ALL_PLATFORMS)}."]},
        )
    if not items:
        raise ValidationFailed(empty_message, fields={"platforms": ["This list may not be empty."]})
    return [p for p in ALL_PLATFORMS if p in items]
