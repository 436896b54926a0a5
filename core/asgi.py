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

A request whose view is sync (every DRF view) then still switched to that
thread and back three times: Django sends ``request_started``, calls the
view and closes the response (``request_finished``) each through
``sync_to_async``, and under load each switch waits for the GIL behind the
event loop. Such a request here makes one switch: its thread runs the
signals and the same middleware, built once more for sync calls (the classes
serve both modes, as under WSGI), around the view, and closes the response
before handing it back, as a WSGI server closes it after its body. Only the
body is then sent from the event loop. A streaming answer is closed after its
last part, and a client that leaves stops it, as in Django's own path. The
kind of view a path leads to is resolved once per path and kept (a path no
view serves counts as sync: its 404 or redirect is sync work). A request
whose view is async takes Django's path unchanged, on a reused thread too.
"""

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from typing import Any, TypeVar

from asgiref.sync import ThreadSensitiveContext, iscoroutinefunction
from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler as DjangoASGIHandler
from django.core.handlers.asgi import get_script_prefix
from django.core.handlers.base import BaseHandler
from django.core.signals import setting_changed
from django.http import FileResponse
from django.http.response import HttpResponseBase
from django.urls import Resolver404, get_resolver, set_script_prefix

_T = TypeVar("_T")


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
        # The same middleware, built for sync calls: the stack a sync view's
        # request runs whole on its thread (see the module's docstring).
        self._sync = BaseHandler()
        self._sync.load_middleware(is_async=False)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)  # Django refuses it
            return
        executor = self._idle.pop() if self._idle else ThreadPoolExecutor(1, thread_name_prefix="asgi-request")
        try:
            if runs_sync(scope):
                await self._handle_sync(scope, receive, send, executor)
            else:
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

    def _bound(self) -> asyncio.Semaphore:
        if self._slots is None:
            self._slots = asyncio.Semaphore(concurrent_requests())
        return self._slots

    async def run_get_response(self, request: Any) -> Any:
        async with self._bound():
            return await super().run_get_response(request)

    async def _handle_sync(self, scope: Any, receive: Any, send: Any, executor: ThreadPoolExecutor) -> None:
        """A sync view's request: one call on its thread, then the body sent from here."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        try:
            async with self._bound():
                response = await _on_thread(executor, self._respond, scope, body_file)
            if response.streaming:
                await self._stream(response, receive, send, executor)
            else:
                await self.send_response(response, send)
        finally:
            body_file.close()

    def _respond(self, scope: Any, body_file: Any) -> HttpResponseBase:
        """The request's sync part, on its thread: what Django's ``handle`` does
        around a sync view in three switches, in one."""
        set_script_prefix(get_script_prefix(scope))
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, error_response = self.create_request(scope, body_file)
        response: Any = error_response if request is None else self._sync.get_response(request)
        response._handler_class = self.__class__
        if isinstance(response, FileResponse):
            response.block_size = self.chunk_size
        if not response.streaming:
            # Its body is in memory: closed here (request_finished: the
            # database connection goes back), before it is sent.
            response.close()
        return response

    async def _stream(self, response: HttpResponseBase, receive: Any, send: Any, executor: ThreadPoolExecutor) -> None:
        """Send a streaming answer until its end or until the client leaves, then close it."""
        sending = asyncio.create_task(self.send_response(response, send))
        listening = asyncio.create_task(self.listen_for_disconnect(receive))
        try:
            await asyncio.wait([sending, listening], return_when=asyncio.FIRST_COMPLETED)
        finally:
            try:
                for task in (listening, sending):
                    task.cancel()
                    with suppress(asyncio.CancelledError, RequestAborted):
                        await task  # a send that failed raises here...
            finally:
                await _on_thread(executor, response.close)  # ...and the answer is still closed


async def _on_thread(executor: ThreadPoolExecutor, call: Callable[..., _T], *args: Any) -> _T:
    """``call(*args)`` on the request's thread, in that thread's own context.

    What asgiref's ``sync_to_async`` does for a request's sync code, without
    its bookkeeping (a fifth of a trivial request's time on the event loop).
    It ran the code in a copy of the request task's context, thrown away
    after the request: Django keeps its cache connections per context, so
    every request built the cache backend and its Redis client anew. In the
    thread's own context they last as long as the thread, as a WSGI
    server's threads keep them. The request's own context-bound state (the
    script prefix, the replica router's scope) is set on the thread, within
    the call; and the sync code here (Django's handler, the middleware, DRF's
    views) calls no ``async_to_sync`` that would need asgiref's bookkeeping."""
    return await asyncio.get_running_loop().run_in_executor(executor, functools.partial(call, *args))


# path -> whether its view is sync; bounded (paths carry ids), a hint only.
_view_kinds: dict[str, bool] = {}
VIEW_KINDS_KEPT = 4096


def runs_sync(scope: Any) -> bool:
    """Whether the request's view is sync (or no view resolves its path: the
    404 and the redirects of the middleware are sync work too)."""
    # The path Django resolves: ASGIRequest's path_info.
    path = str(scope.get("path", ""))
    script_name = get_script_prefix(scope)
    if script_name:
        path = path.removeprefix(script_name)
    known = _view_kinds.get(path)
    if known is not None:
        return known
    try:
        sync = not iscoroutinefunction(get_resolver().resolve(path or "/").func)
    except Resolver404:
        sync = True
    if len(_view_kinds) >= VIEW_KINDS_KEPT:
        _view_kinds.clear()
    _view_kinds[path] = sync
    return sync


def _forget_view_kinds(*, setting: str, **kwargs: Any) -> None:
    if setting == "ROOT_URLCONF":
        _view_kinds.clear()


setting_changed.connect(_forget_view_kinds)
