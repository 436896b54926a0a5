"""The event stream's own ASGI route, in front of Django.

A stream is a long, idle response: Django's request machinery (the request
and response objects, the middleware stack, two tasks per request) would
stay alive for each one for a minute and cost more than the stream itself.
This route answers ``GET`` of the stream's path before Django: it
authenticates from the same Redis-cached lookups Django's session and token
authentication use (``core.authentication``: no SQL once cached; any
connection a miss opened is given back before streaming), then streams from
the process's hub (``core.live.EventStream``). Everything else, and any
request it cannot authenticate (no credentials, a bad token, an error), goes
to Django, which answers with the API's usual envelope: the route only ever
serves the success case, so the two cannot disagree on an error.
"""

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping
from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib import auth
from django.db import connections
from django.http import HttpRequest
from django.http.cookie import parse_cookie
from rest_framework.exceptions import AuthenticationFailed

from core import live
from core.authentication import TokenAuthentication
from core.selectors import user_platforms

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # nginx: pass events through unbuffered
    (b"x-content-type-options", b"nosniff"),
]


def identify(*, cookie: str, authorization: str) -> tuple[int, list[str]] | None:
    """The user id and platforms behind these credentials, or None.

    The lookups Django's authentication makes, in the same order as the API
    (a token first, then the session), each served from its Redis read-through
    entry; a miss reads PostgreSQL once and the connection is given back here.
    """
    try:
        user: Any = None
        keyword, _, key = authorization.partition(" ")
        if authorization:
            if keyword != TokenAuthentication.keyword or not key.strip():
                return None
            try:
                user, _ = TokenAuthentication().authenticate_credentials(key.strip())
            except AuthenticationFailed:
                return None
        else:
            session_key = parse_cookie(cookie).get(settings.SESSION_COOKIE_NAME) if cookie else None
            if not session_key:
                return None
            request = HttpRequest()
            request.session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
            user = auth.get_user(request)
        if user is None or not user.is_authenticated:
            return None
        return int(user.pk), user_platforms(user=user)
    finally:
        for connection in connections.all(initialized_only=True):
            if not connection.in_atomic_block:
                connection.close()


class LiveStreamRoute:
    """``application = LiveStreamRoute(django_app, path=..., event=...)``."""

    def __init__(self, app: App, *, path: str, event: str) -> None:
        self.app = app
        self.path = path
        self.event = event

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != self.path or scope["method"] != "GET" or not live.available():
            await self.app(scope, receive, send)
            return
        cookie = authorization = ""
        for name, value in scope.get("headers", ()):
            if name == b"cookie":
                cookie = value.decode("latin-1")
            elif name == b"authorization":
                authorization = value.decode("latin-1")
        try:
            # A plain executor call, not sync_to_async: that one runs the lookup in
            # this request's context, where Django's per-context cache and
            # database handles would stay alive with the stream (a Redis client
            # each, 13 KB); here they belong to the executor's few threads.
            lookup = functools.partial(identify, cookie=cookie, authorization=authorization)
            identity = await asyncio.get_running_loop().run_in_executor(None, lookup)
        except Exception:  # Django answers it (its error envelope, or a 503)
            identity = None
        if identity is None:
            await self.app(scope, receive, send)
            return
        user_id, platforms = identity
        stream = live.EventStream(user_id=user_id, event=self.event, platforms=platforms)
        watcher = asyncio.create_task(_watch(receive, stream))

        def body(chunk: bytes) -> Awaitable[None]:
            # The send itself, not a coroutine around it: the hub drives it
            # directly for each stream of a broadcast (core.live._Listener.offer).
            return send({"type": "http.response.body", "body": chunk, "more_body": True})

        try:
            await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
            await stream.serve(body, direct_write(send))
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # the client went away mid-write
        finally:
            watcher.cancel()


# The server whose response cycles the hub may write to directly: uvicorn's
# httptools protocol (its default when httptools is installed, as here).
UVICORN_HTTPTOOLS = "uvicorn.protocols.http.httptools_impl"


class _UvicornDirect:
    """The socket under a uvicorn (httptools) response, for the hub's writes.

    uvicorn answers a body chunk by writing ``chunk(body)`` to its transport,
    which writes to the socket at the end of the loop's turn (uvloop) or at
    once, buffering what the socket does not take. So a chunk the hub writes
    to the socket itself is exactly what uvicorn would have sent, provided
    the transport holds nothing unsent, the response is still going and the
    server is not waiting for the client to read (``idle``); what the socket
    does not take goes through the transport after it (``rest``), in order.
    """

    __slots__ = ("_buffered", "_closing", "_cycle", "_flow", "fd", "rest")

    def __init__(self, cycle: Any, fd: int) -> None:
        transport = cycle.transport
        self._cycle = cycle
        self._flow = cycle.flow
        self._buffered = transport.get_write_buffer_size
        self._closing = transport.is_closing
        self.rest = transport.write
        self.fd = fd

    def idle(self) -> bool:
        cycle = self._cycle
        if cycle.disconnected or cycle.response_complete or self._flow.write_paused:
            return False
        return self._buffered() == 0 and not self._closing()


def direct_write(send: Send) -> live.DirectWrite | None:
    """The stream's socket for the hub's own writes when ``send`` is a uvicorn
    httptools response's (chunked, as a stream's response is, and plain
    HTTP: never under TLS), else None: the hub then writes through ``send``,
    as under any other server."""
    cycle: Any = getattr(send, "__self__", None)
    if type(cycle).__module__ != UVICORN_HTTPTOOLS:
        return None
    try:
        # Under TLS the socket carries the encrypted stream: only the transport may write to it.
        if cycle.chunked_encoding is not True or cycle.transport.get_extra_info("ssl_object") is not None:
            return None
        if cycle.scope.get("scheme") != "http":
            return None
        sock = cycle.transport.get_extra_info("socket")
        fd = sock.fileno() if sock is not None else -1
        # The attributes idle() reads, checked once: a uvicorn that renamed one falls back to send.
        if fd < 0 or not isinstance(cycle.disconnected, bool) or not isinstance(cycle.flow.write_paused, bool):
            return None
        if not isinstance(cycle.response_complete, bool):
            return None
        return _UvicornDirect(cycle, fd)
    except (AttributeError, OSError):
        return None


async def _watch(receive: Receive, stream: live.EventStream) -> None:
    """End the stream as soon as the client disconnects (not at its next write)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            stream.close()
            return
