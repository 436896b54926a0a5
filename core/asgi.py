"""The project's ASGI handler: Django's, with the requests that run sync code
at once bounded per process.

Django runs each ASGI request's sync code (a DRF view, the request signals)
in a thread of that request's own, with no ceiling: under a burst of N
concurrent requests a process ran N threads, each taking a PostgreSQL
connection from the pool and a Redis connection from the bounded pool at the
same moment. Past the pools' sizes the surplus waited for a connection and
failed: the read model fell back to PostgreSQL (draining that pool too) and
the rest answered 503 after the pool timeouts. Here at most
``ASGI_CONCURRENT_REQUESTS`` requests per process run their view at once;
the others wait on the event loop, where waiting costs no thread and no
connection. A streaming answer (the event stream) leaves its slot as soon as
its view has returned: the stream itself is sent outside the bound.
"""

import asyncio
from typing import Any

from django.conf import settings
from django.core.handlers.asgi import ASGIHandler as DjangoASGIHandler


def concurrent_requests() -> int:
    """The bound: the setting, else what both pools can serve at once."""
    configured = int(settings.ASGI_CONCURRENT_REQUESTS)
    if configured > 0:
        return configured
    return max(1, min(int(settings.DATABASE_POOL_MAX_SIZE), int(settings.REDIS_POOL_MAX_CONNECTIONS)))


class ASGIHandler(DjangoASGIHandler):
    def __init__(self) -> None:
        super().__init__()
        # Made on first use: a semaphore binds to the loop that first waits on it.
        self._slots: asyncio.Semaphore | None = None

    async def run_get_response(self, request: Any) -> Any:
        if self._slots is None:
            self._slots = asyncio.Semaphore(concurrent_requests())
        async with self._slots:
            return await super().run_get_response(request)
