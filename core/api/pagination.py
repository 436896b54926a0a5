"""Paging: opaque, signed cursors and the one adapter shape of the read-back lists.

A cursor is a small dict (for the inbox: the last score seen and how many
items at that score were already returned: paging by max score plus offset,
so items arriving meanwhile never make a page repeat or skip), signed so that
a forged or garbled cursor is a clear 400.
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

from django.core import signing
from django.db.models import Model, Q, QuerySet
from rest_framework.request import Request
from rest_framework.response import Response

from core.api.errors import ValidationFailed
from core.api.params import parse_limit

_SALT = "messagecenter.cursor"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

T = TypeVar("T", bound=Model)
Item = TypeVar("Item")


# A plain Signer, not signing.dumps's TimestampSigner: cursors never expire,
# and without a timestamp the same position always gets the same cursor (two
# paths that agree give equal cursors, whatever second they were made in).
def _signer() -> signing.Signer:
    return signing.Signer(salt=_SALT)


def encode_cursor(payload: dict[str, Any], *, scope: str) -> str:
    return _signer().sign_object({"s": scope, **payload}, compress=True)


def decode_cursor(value: str, *, scope: str) -> dict[str, Any]:
    """Decode a cursor made for ``scope``; anything else raises ValidationFailed."""
    try:
        payload = _signer().unsign_object(value)
    except (signing.BadSignature, ValueError, TypeError) as exc:
        raise ValidationFailed(
            "The cursor is not valid.", code="invalid_cursor", fields={"cursor": ["Invalid cursor."]}
        ) from exc
    if not isinstance(payload, dict) or payload.pop("s", None) != scope:
        raise ValidationFailed(
            "The cursor is not valid.", code="invalid_cursor", fields={"cursor": ["Invalid cursor."]}
        )
    return payload


@dataclass(frozen=True)
class KeysetPage(Generic[Item]):
    items: list[Item]
    next_cursor: str | None


def keyset_page(
    queryset: QuerySet[T], *, limit: int, cursor: str | None, scope: str, time_field: str = "created_at"
) -> KeysetPage[T]:
    """One page of ``queryset`` newest first, by (``time_field``, id) descending.

    The cursor holds the last (time, id) returned and the next page starts
    strictly below it: rows arriving meanwhile sort above the cursor (or, in a
    tie on time, by id), so paging never repeats or skips a row. ``scope``
    binds a cursor to its list (and its filters), so one list's cursor is a
    400 on another.
    """
    rows = queryset.order_by(f"-{time_field}", "-id")
    if cursor:
        payload = decode_cursor(cursor, scope=scope)
        at, last_id = payload.get("t"), payload.get("i")
        if not isinstance(at, int) or not isinstance(last_id, int) or isinstance(at, bool):
            raise ValidationFailed(
                "The cursor is not valid.", code="invalid_cursor", fields={"cursor": ["Invalid cursor."]}
            )
        when = _EPOCH + timedelta(microseconds=at)
        rows = rows.filter(Q(**{f"{time_field}__lt": when}) | Q(**{time_field: when, "id__lt": last_id}))
    items = list(rows[: limit + 1])
    next_cursor = None
    if len(items) > limit:
        items = items[:limit]
        last = items[-1]
        moment: datetime = getattr(last, time_field)
        micros = (moment - _EPOCH) // timedelta(microseconds=1)
        next_cursor = encode_cursor({"t": micros, "i": last.pk}, scope=scope)
    return KeysetPage(items=items, next_cursor=next_cursor)


def list_response(
    request: Request, select: Callable[..., KeysetPage[Any]], serialize: Callable[[list[Any]], Any], **filters: Any
) -> Response:
    """``limit`` and ``cursor`` from the query string, the list's own filters
    (parsed by the caller), one selector call, and the page as every list
    answers it: ``{"results": [...], "next_cursor": str | null}``."""
    params = request.query_params
    page = select(limit=parse_limit(params.get("limit")), cursor=params.get("cursor"), **filters)
    return Response({"results": serialize(page.items), "next_cursor": page.next_cursor})
