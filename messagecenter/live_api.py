"""HTTP adapters of the live inbox: the counts endpoint with ETag/304, and the
server-sent event stream of the signed-in user."""

import json
from typing import Any

from adrf.views import APIView as AsyncAPIView
from asgiref.sync import sync_to_async
from django.db import connection
from django.http import HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.selectors import user_platforms
from core.api.openapi import ErrorEnvelope
from live import transport as live_transport
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


class EventStreamRenderer(BaseRenderer):
    """Lets ``Accept: text/event-stream`` (what EventSource sends) through content
    negotiation; a stream bypasses rendering, an error answer is its JSON envelope."""

    media_type = "text/event-stream"
    format = "event-stream"
    charset = None

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        return b"" if data is None else json.dumps(data).encode()


STREAM_DESCRIPTION = """Server-sent events (`text/event-stream`) for the signed-in user's pages.

The stream opens with `retry: 3000` and a `hello` event carrying the user's live version
(`data: {"v": 7}`), then sends an `inbox` event for every change the user's counts or lists
may show, and a `: keepalive` comment line when it was quiet for a while. It ends after about
a minute; EventSource reconnects by itself after `retry` milliseconds (no `Last-Event-ID`
replay: the page refetches its counts on every `hello`).

`inbox` events, one JSON object each in `data`:

- the user's own changes: `{"v": 8, "reason": "deliver"}` (a pushed message or a
  subscription notification), `read`, `unread`, `read_all`, `seen`, `hide`, `place`,
  `announcement` (the user read an announcement); `v` is the user's new version;
- broadcasts: `{"reason": "pull", "scope": "everyone", "spread": 2000}` (a message to
  everyone or a large audience), `bulletin` (a bulletin reached its display time, or was
  edited), `remove` (a retraction or delete), `announcement` with a platform `scope`
  (published, at its publish time), `resync` (events may have been missed). A page waits a
  random part of `spread` milliseconds, then refetches its counts.

A stream that cannot start (the read model unreachable) sends `retry: 15000` and one
`unavailable` event, then ends; pages poll the counts meanwhile."""


def _stream_start(*, user: Any, blocking: bool) -> tuple[list[str], bool]:
    """The user's platforms, and whether a blocking stream can start now (Redis
    answers; an ASGI stream finds out itself). Runs in the thread that
    authenticated the request: the database connection that sign-in used is
    given back here (to the pool, or closed when there is none), since Django
    gives it back only when the response closes, up to a minute later, and a
    few dozen open pages would otherwise drain the pool."""
    try:
        platforms = user_platforms(user=user)
        return platforms, (not blocking or live.live_ready(user=user))
    finally:
        if not connection.in_atomic_block:
            connection.close()


class InboxStreamApi(AsyncAPIView):
    """``GET /api/v1/inbox/stream/``: the signed-in user's server-sent events
    (session or token; EventSource sends the session cookie).

    An async view: DRF's authentication, permissions and throttles run as for
    every endpoint, then the stream is a ``StreamingHttpResponse``. Under an
    ASGI server it iterates the process's hub (``live.transport``) on the event
    loop and Django sends each chunk through ASGI ``send``; under a WSGI
    server it is the blocking stream (its own pub/sub, a worker thread for
    its life), since Django would read an async iterator to its end before
    sending a byte there.
    """

    renderer_classes = [JSONRenderer, EventStreamRenderer]

    @extend_schema(
        operation_id="inbox_stream",
        description=STREAM_DESCRIPTION,
        responses={
            (200, "text/event-stream"): OpenApiResponse(
                OpenApiTypes.STR,
                description="The event stream.",
                examples=[
                    OpenApiExample(
                        "events",
                        value='retry: 3000\n\nevent: hello\ndata: {"v":7}\n\n'
                        'event: inbox\ndata: {"v":8,"reason":"deliver"}\n\n'
                        'event: inbox\ndata: {"reason":"bulletin","scope":"everyone","spread":2000}\n\n'
                        ": keepalive\n\n",
                    )
                ],
            ),
            204: OpenApiResponse(description="Live updates are off (Redis Cluster): poll the counts."),
            401: OpenApiResponse(ErrorEnvelope, description="No credentials."),
            503: OpenApiResponse(ErrorEnvelope, description="Live updates are unavailable: poll the counts."),
        },
    )
    async def get(self, request: Request) -> HttpResponseBase:
        if not live.live_available():
            # 204 tells EventSource to stop reconnecting; the page keeps polling.
            return HttpResponse(status=204)
        user = request.user
        # PEP 3333 puts wsgi.version in every WSGI environ, which Django's
        # WSGI requests carry as META; an ASGI request has none.
        blocking = "wsgi.version" in request.META
        platforms, ready = await sync_to_async(_stream_start)(user=user, blocking=blocking)
        if not ready:
            # Any status but 200 closes EventSource for good: the page polls instead.
            return Response(
                {"error": {"code": "unavailable", "message": "Live updates are unavailable."}},
                status=503,
                headers={"Retry-After": str(live_transport.RETRY_DOWN_MS // 1000)},
            )
        user_id = int(user.pk or 0)  # authenticated (the permission above): never 0
        content = (
            live.inbox_event_stream(user_id=user_id, platforms=platforms)
            if blocking
            else live.inbox_event_stream_async(user_id=user_id, platforms=platforms)
        )
        stream = StreamingHttpResponse(content, content_type="text/event-stream")
        stream["Cache-Control"] = "no-cache"
        stream["X-Accel-Buffering"] = "no"  # nginx: pass events through unbuffered
        return stream
