"""The ASGI application: Django's own handler, plus the lifespan protocol.

Every HTTP request goes through Django (its middleware, URL resolver and one
view). The small callable in front only answers the server's ``lifespan``
messages, which Django's handler refuses: at shutdown it closes the process's
live hub, so the streams' Redis subscription ends cleanly.
"""

import gc
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from django.core.asgi import get_asgi_application

from core.replicas import check_replicas_reachable

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
django_application = get_asgi_application()
# As config/wsgi.py: what the process holds now lives as long as it does, and
# a full collection no longer walks it.
gc.freeze()

# Imported once Django is set up (the line above).
from live.transport import hub_close  # noqa: E402

# A replica that does not answer stops the process here, before it serves.
check_replicas_reachable()

# The ASGI callables' types as Django's handler declares them.
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]


async def lifespan(receive: Receive, send: Send) -> None:
    """Answer the server's startup and shutdown messages until shutdown."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            try:
                await hub_close()
            except Exception as exc:  # the server logs it and exits all the same
                await send({"type": "lifespan.shutdown.failed", "message": repr(exc)})
            else:
                await send({"type": "lifespan.shutdown.complete"})
            return


async def application(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        await lifespan(receive, send)
        return
    await django_application(scope, receive, send)
