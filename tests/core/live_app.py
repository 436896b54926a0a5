"""The applications the live servers' tests serve. ``application``: Django's
own ASGI handler for every request, and the lifespan protocol for startup
and shutdown, whose shutdown closes the process's live hub (as
config/asgi.py does); it prints one line once the hub is closed, for the
test to see in the server's log. ``wsgi_application``: Django's own WSGI
handler, for a gunicorn."""

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from django.core.asgi import get_asgi_application
from django.core.wsgi import get_wsgi_application

django_application = get_asgi_application()
wsgi_application = get_wsgi_application()

from core import live  # noqa: E402  (after Django is set up)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

CLOSED = "live hub closed"


async def application(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "lifespan":
        await django_application(scope, receive, send)
        return
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await live.hub_close()
            print(CLOSED, flush=True)
            await send({"type": "lifespan.shutdown.complete"})
            return
