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
            await stream.serve(body)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # the client went away mid-write
        finally:
            watcher.cancel()


async def _watch(receive: Receive, stream: live.EventStream) -> None:
    """End the stream as soon as the client disconnects (not at its next write)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            stream.close()
            return
