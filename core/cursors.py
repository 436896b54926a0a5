"""Opaque, signed paging cursors.

A cursor is a small dict (for the inbox: the last score seen and how many
items at that score were already returned: paging by max score plus offset,
so items arriving meanwhile never make a page repeat or skip), signed so that a forged or garbled cursor is a clear 400.
"""

from typing import Any

from django.core import signing

from core.exceptions import ValidationFailed

_SALT = "messagecenter.cursor"


def encode_cursor(payload: dict[str, Any], *, scope: str) -> str:
    return signing.dumps({"s": scope, **payload}, salt=_SALT, compress=True)


def decode_cursor(value: str, *, scope: str) -> dict[str, Any]:
    """Decode a cursor made for ``scope``; anything else raises ValidationFailed."""
    try:
        payload = signing.loads(value, salt=_SALT)
    except (signing.BadSignature, ValueError, TypeError) as exc:
        raise ValidationFailed(
            "The cursor is not valid.", code="invalid_cursor", fields={"cursor": ["Invalid cursor."]}
        ) from exc
    if not isinstance(payload, dict) or payload.pop("s", None) != scope:
        raise ValidationFailed(
            "The cursor is not valid.", code="invalid_cursor", fields={"cursor": ["Invalid cursor."]}
        )
    return payload
