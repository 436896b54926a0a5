"""The user's channel choices per inbox category, and their defaults.

``UserPreferences.channels`` keeps only what a user changed; everything else
follows the defaults here, so the stored JSON stays small and a user who
never chose sees later defaults.
"""

from collections.abc import Mapping
from typing import Any

from messagecenter.models import CATEGORIES

EMAIL_IF_UNREAD = "if_unread"
EMAIL_DIGEST = "digest"
EMAIL_OFF = "off"
EMAIL_CHOICES: tuple[str, ...] = (EMAIL_IF_UNREAD, EMAIL_DIGEST, EMAIL_OFF)
DEFAULT_EMAIL = EMAIL_IF_UNREAD
DEFAULT_WEB_PUSH = True
CHANNEL_FIELDS: tuple[str, ...] = ("email", "web_push")


def _entry(stored: Any) -> Mapping[str, Any]:
    return stored if isinstance(stored, Mapping) else {}


def email_mode(stored: Any, category: str) -> str:
    """``if_unread``, ``digest`` or ``off`` for items of ``category``."""
    value = _entry(_entry(stored).get(category)).get("email")
    return value if value in EMAIL_CHOICES else DEFAULT_EMAIL


def wants_push(stored: Any, category: str) -> bool:
    value = _entry(_entry(stored).get(category)).get("web_push")
    return value if isinstance(value, bool) else DEFAULT_WEB_PUSH


def channels_view(stored: Any) -> dict[str, dict[str, Any]]:
    """Every category with both channels, the defaults filled in."""
    return {c: {"email": email_mode(stored, c), "web_push": wants_push(stored, c)} for c in CATEGORIES}


def channels_merge(stored: Any, changes: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The stored choices with ``changes`` (already validated) laid over them,
    values equal to the defaults dropped."""
    merged = {c: dict(_entry(v)) for c, v in _entry(stored).items() if c in CATEGORIES}
    for category, fields in changes.items():
        merged.setdefault(category, {}).update(fields)
    compact: dict[str, dict[str, Any]] = {}
    for category, fields in merged.items():
        kept = {
            k: v
            for k, v in fields.items()
            if (k == "email" and v != DEFAULT_EMAIL) or (k == "web_push" and v != DEFAULT_WEB_PUSH)
        }
        if kept:
            compact[category] = kept
    return compact
