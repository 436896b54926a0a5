"""HTTP adapters of the live inbox: the counts endpoint with ETag/304, and the
server-sent event stream of the signed-in user."""

from django.core.handlers.asgi import ASGIRequest
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from core.openapi import ErrorEnvelope
from messagecenter import live
from messagecenter.apis.inbox import InboxCountsApi


def _matches(if_none_match: str, etag: str) -> bool:
    # Weak comparison (RFC 9110 13.1.2): proxies may add or drop the W/ prefix.
    def bare(tag: str) -> str:
        return tag.strip().removeprefix("W/")

    return any(bare(tag) == bare(etag) or tag.strip() == "*" for tag in if_none_match.split(","))


class InboxCountsLiveApi(InboxCountsApi):
    """``GET /api/v1/inbox/counts/`` plus a per-user ETag of the answer: a
    poll whose ``If-None-Match`` still matches gets 304 and no body."""

    @extend_schema(
        operation_id="inbox_counts",
        parameters=[OpenApiParameter("If-None-Match", str, OpenApiParameter.HEADER, required=False)],
        responses={
            200: InboxCountsApi.OutputSerializer,
            304: OpenApiResponse(description="Not modified since the ETag given in If-None-Match."),
            401: OpenApiResponse(ErrorEnvelope, description="No credentials."),
            503: OpenApiResponse(ErrorEnvelope, description="The read model or the database is unavailable."),
        },
    )
    def get(self, request: Request) -> Response:
        # The ETag is the answer's own: one read serves both (none when held).
        answer, etag = live.inbox_counts_with_etag(user=request.user)  # type: ignore[arg-type]
        if _matches(request.headers.get("If-None-Match", ""), etag):
            response = Response(status=304)
        else:
            response = Response(self.OutputSerializer(answer).data)
        response["ETag"] = etag
        # Every poll must reach the server (which answers 304 cheaply).
        response["Cache-Control"] = "private, no-cache"
        return response


def inbox_stream(request: HttpRequest) -> HttpResponseBase:
    """``GET /api/v1/inbox/stream/``: ``text/event-stream`` of the signed-in
    user's inbox changes (session authentication, as EventSource sends cookies)."""
    if not request.user.is_authenticated:
        return JsonResponse({"error": {"code": "not_authenticated", "message": "Sign in first."}}, status=401)
    if not live.live_available():
        # 204 tells EventSource to stop reconnecting; the page keeps polling.
        return HttpResponse(status=204)
    if not live.live_ready(user=request.user):
        # Any status but 200 closes EventSource for good: the page polls instead.
        return JsonResponse({"error": {"code": "unavailable", "message": "Live updates are unavailable."}}, status=503)
    user_id = int(request.user.pk)
    # The stream needs no database, and Django gives the request's connection
    # back only when the response is closed, up to a minute later: give it back
    # now (to the pool, or closed when there is none). Under ASGI an open
    # stream would otherwise keep a pooled connection out for its whole life,
    # and a few dozen pages would drain the pool.
    if not connection.in_atomic_block:
        connection.close()
    if isinstance(request, ASGIRequest):
        stream = StreamingHttpResponse(live.inbox_event_stream_async(user_id=user_id), content_type="text/event-stream")
    else:
        stream = StreamingHttpResponse(live.inbox_event_stream(user_id=user_id), content_type="text/event-stream")
    stream["Cache-Control"] = "no-cache"
    stream["X-Accel-Buffering"] = "no"  # nginx: pass events through unbuffered
    return stream
