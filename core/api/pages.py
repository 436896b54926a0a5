"""The one adapter shape of the operators' read-back lists."""

from collections.abc import Callable
from typing import Any

from rest_framework.request import Request
from rest_framework.response import Response

from core.api.cursors import KeysetPage
from core.api.params import parse_limit


def list_response(
    request: Request, select: Callable[..., KeysetPage[Any]], serialize: Callable[[list[Any]], Any], **filters: Any
) -> Response:
    """``limit`` and ``cursor`` from the query string, the list's own filters
    (parsed by the caller), one selector call, and the page as every list
    answers it: ``{"results": [...], "next_cursor": str | null}``."""
    params = request.query_params
    page = select(limit=parse_limit(params.get("limit")), cursor=params.get("cursor"), **filters)
    return Response({"results": serialize(page.items), "next_cursor": page.next_cursor})
