"""The applications the live servers' tests serve. ``application``: the
project's own ASGI application (config/asgi.py: Django's handler behind the
lifespan protocol, whose shutdown closes the process's live hub), which here
also prints one line once that shutdown completed, for the test to see in the
server's log. ``wsgi_application``: the project's WSGI application, for a
gunicorn."""

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from config.asgi import application as project_application
from config.wsgi import application as wsgi_application

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

CLOSED = "live hub closed"

__all__ = ["CLOSED", "application", "wsgi_application"]


async def application(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "lifespan":
        # ASGI's scope, receive and send as a server passes them; the project's application types them narrower.
        await project_application(scope, receive, send)  # type: ignore[arg-type]
        return

    async def noting_send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "lifespan.shutdown.complete":
            print(CLOSED, flush=True)
        await send(message)

    # ASGI's scope, receive and send as a server passes them; the project's application types them narrower.
    await project_application(scope, receive, noting_send)  # type: ignore[arg-type]
