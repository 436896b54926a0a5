"""The fast route (core/fast_asgi.py) in front of Django under WSGI.

A gunicorn sync worker spends more on Django's request machinery (the
middleware, DRF's request, negotiation and rendering) than on the round
trips a bell's poll or an inbox mark needs: the counts cost 0.77x the DRF
ping view, a mark 0.65x. The fast route skips that machinery under ASGI; this
front gives WSGI the same route, the same handlers and the same rules (it
only ever answers the success case, with the headers Django sent for the
last answer of the kind; everything else is Django's).

The handlers are coroutines on ``redis.asyncio``. Each worker process runs
them to completion on an event loop of its own, in its main thread, where a
sync worker serves its requests: no thread hop, one small pool of Redis
connections per process. A request on any other thread (``runserver``'s, a
threaded worker's) goes to Django, as does everything when
``WSGI_FAST_READS`` is off.
"""

import asyncio
import io
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from http import HTTPStatus
from typing import Any

from django.conf import settings

from core import metrics
from core.fast_asgi import (
    MAX_IGNORED_BODY,
    TOKEN_NOT_FRESH,
    FastCore,
    answer_headers,
    count_outcome,
    fill_token,
    learn_key,
    token_of,
)

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def _headers(environ: Mapping[str, Any]) -> dict[bytes, bytes]:
    """The request's headers as ASGI names them (lower case, dashes)."""
    headers = {
        name[5:].replace("_", "-").lower().encode("latin-1"): str(value).encode("latin-1")
        for name, value in environ.items()
        if name.startswith("HTTP_")
    }
    for name in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(name):
            headers[name.replace("_", "-").lower().encode()] = str(environ[name]).encode("latin-1")
    return headers


def _small_body(environ: dict[str, Any]) -> bool:
    """Read a write's body (at most ``MAX_IGNORED_BODY``) and put it back for
    Django; False when it is larger or its length is not given."""
    raw = environ.get("CONTENT_LENGTH") or "0"
    try:
        length = int(raw)
    except ValueError:
        return False
    if environ.get("HTTP_TRANSFER_ENCODING") or not 0 <= length <= MAX_IGNORED_BODY:
        return False
    if length:
        environ["wsgi.input"] = io.BytesIO(environ["wsgi.input"].read(length))
    return True


class _Loop:
    """This process's event loop for the fast route (its main thread only)."""

    def __init__(self) -> None:
        self._pid = 0
        self._loop: asyncio.AbstractEventLoop | None = None

    def get(self) -> asyncio.AbstractEventLoop | None:
        if threading.current_thread() is not threading.main_thread():
            return None
        if self._loop is None or self._pid != os.getpid():
            # A forked worker makes its own: a loop and its sockets are not shared
            # across a fork. asyncio's own loop, not uvloop's: run in a main
            # thread, uvloop sets up and tears down a signal wake-up socket pair
            # on every run (29 µs a run against 9), more than its scheduling saves.
            self._loop, self._pid = asyncio.new_event_loop(), os.getpid()
        return self._loop


class FastWSGIRoutes:
    """``application = FastWSGIRoutes(get_wsgi_application())``."""

    def __init__(self, app: WSGIApp) -> None:
        self.app = app
        self.core = FastCore()
        self._loop = _Loop()

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "")
        found = None
        if settings.WSGI_FAST_READS and not environ.get("SCRIPT_NAME"):
            found = self.core.route(method, environ.get("PATH_INFO", ""))
        loop = self._loop.get() if found is not None else None
        if found is None or loop is None or (found[0].write and not _small_body(environ)):
            return self.app(environ, start_response)
        route, kwargs = found
        headers = _headers(environ)
        token = token_of(headers.get(b"authorization"))
        learn_as = learn_key(route, method, environ.get("wsgi.url_scheme"), headers)
        learned = self.core.learned(learn_as)
        answer = None
        started = time.perf_counter()
        if learned is not None:
            raw_query = environ.get("QUERY_STRING", "").encode("latin-1")
            answer = loop.run_until_complete(self.core.answer(route, token, headers, raw_query, kwargs))
            if answer is TOKEN_NOT_FRESH:  # filled here (a sync worker may read PostgreSQL), then asked again
                entry = fill_token(token)
                answer = (
                    loop.run_until_complete(self.core.answer(route, token, headers, raw_query, kwargs, entry))
                    if entry is not None
                    else None
                )
        count_outcome(route, method, answer is not None)
        if answer is None or learned is None:
            return self.app(environ, self._learning(start_response, learn_as) if token is not None else start_response)
        status = HTTPStatus(answer.status)
        start_response(
            f"{status.value} {status.phrase}",
            [(n.decode("latin-1"), v.decode("latin-1")) for n, v in answer_headers(answer, learned)],
        )
        metrics.observe_request(route=route.pattern, method=method, status=answer.status, started=started)
        return [answer.body]

    def _learning(self, start_response: StartResponse, learn_as: tuple[Any, ...]) -> StartResponse:
        """``start_response`` that keeps the headers of Django's successful answer."""

        def learning_start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            sent = [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in headers]
            self.core.learn(learn_as, int(status.split(" ", 1)[0]), sent)
            return start_response(status, headers, exc_info) if exc_info else start_response(status, headers)

        return learning_start_response
