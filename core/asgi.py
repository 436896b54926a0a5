"""The project's ASGI handler: Django's, with the requests that run sync code
at once bounded per process, and each request's sync thread reused.

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

That thread of its own was also a new one every time: Django enters a fresh
``ThreadSensitiveContext`` per request, which starts a one-thread executor on
the request's first sync call and, at the end, starts one more thread to
join it. Two thread starts and a join per request took about a quarter of a
worker's time on a trivial endpoint (uvicorn served a third of gunicorn's
requests/s). Here each request still gets a context of its own, so all its
sync code runs on one thread as Django expects, but the context is given a
one-thread executor from this process's idle ones, handed back when the
request ends: the threads outlive the requests, as a WSGI server's do.
"""

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler as DjangoASGIHandler


def concurrent_requests() -> int:
    """The bound: the setting, else what both pools can serve at once."""
    configured = int(settings.ASGI_CONCURRENT_REQUESTS)
    if configured > 0:
        return configured
    return max(1, min(int(settings.DATABASE_POOL_MAX_SIZE), int(settings.REDIS_POOL_MAX_CONNECTIONS)))


def idle_threads_kept() -> int:
    """Idle request threads a process keeps for the next requests: a few more
    than run views at once (requests also take their thread for Django's
    request signals before they wait for a slot). A burst past it starts
    threads that are let go once it has passed."""
    return 2 * concurrent_requests() + 8


class ASGIHandler(DjangoASGIHandler):
    def __init__(self) -> None:
        super().__init__()
        # Made on first use: a semaphore binds to the loop that first waits on it.
        self._slots: asyncio.Semaphore | None = None
        # One-thread executors of finished requests, for the next ones.
        self._idle: list[ThreadPoolExecutor] = []
        self._keep = idle_threads_kept()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)  # Django refuses it
            return
        executor = self._idle.pop() if self._idle else ThreadPoolExecutor(1, thread_name_prefix="asgi-request")
        try:
            # The context owns no executor of its own: it does not shut this one down.
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            # A request cancelled mid-call may leave its call running on the
            # thread: the next request's calls then queue behind it, in order.
            if len(self._idle) < self._keep:
                self._idle.append(executor)
            else:
                executor.shutdown(wait=False)

    async def run_get_response(self, request: Any) -> Any:
        if self._slots is None:
            self._slots = asyncio.Semaphore(concurrent_requests())
        async with self._slots:
            return await super().run_get_response(request)
