"""Core's routes: the 400 of a malformed id after a resource's id routes."""

from typing import Any

from django.urls import URLPattern, path
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api.errors import NotFound, ValidationFailed
from core.api.permissions import IsOperator


class MalformedIdApi(APIView):
    """``<resource>/<not an id>/``: the id routes match only well-formed ids.

    Whatever the method, a malformed id is a 400 that names the problem (the
    client sent something that was never an id). Digits past any row's range
    are an id no row can have: 404. The permission check runs first, so the
    answer says nothing to whoever may not use the route; the user-facing
    routes pass their own ``permission_classes`` to ``as_view``.
    """

    permission_classes = [IsOperator]
    schema = None  # not an operation of its own: the id routes document the paths

    def _refuse(self, request: Request, raw: str, *args: Any, **kwargs: Any) -> Response:
        if raw.isascii() and raw.isdigit() and not raw.startswith("0"):
            raise NotFound("No such object.")
        raise ValidationFailed(
            "The id in the path is malformed: an id is a positive integer.",
            code="invalid_id",
            fields={"id": ["Must be a positive integer."]},
        )

    get = post = put = patch = delete = _refuse


app_name = "core"


def malformed_id_path(prefix: str, suffix: str = "", *, operators_only: bool = True) -> URLPattern:
    """``<prefix><anything else>/<suffix>`` after a resource's id routes: a malformed id is a 400.

    Routes every signed-in user may call (``operators_only=False``) answer the
    400 to any of them; the others only to operators (403 before anything else)."""
    if operators_only:
        return path(f"{prefix}<str:raw>/{suffix}", MalformedIdApi.as_view())
    return path(f"{prefix}<str:raw>/{suffix}", MalformedIdApi.as_view(permission_classes=[IsAuthenticated]))
