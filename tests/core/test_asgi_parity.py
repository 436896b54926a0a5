"""The hot endpoints answer the same under ASGI as under WSGI, and an ASGI
request that needs no database opens none.

Under ASGI the middleware stack runs on the event loop (core.middleware's
inline hooks); these tests call each endpoint through Django's AsyncClient
(the ASGI handler, its middleware built in async mode), through the
project's ASGI handler as a server calls it (core/asgi.py: a sync view's
request runs whole on its thread) and through the plain test client (the
WSGI handler), for the same user and data, and compare status, body and
headers.
"""

import asyncio
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from asgiref.sync import async_to_sync, iscoroutinefunction, sync_to_async
from django.conf import settings
from django.core import signals
from django.core.cache import caches
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.base import BaseHandler
from django.db.backends.base.base import BaseDatabaseWrapper
from django.http import HttpResponse, StreamingHttpResponse
from django.test import AsyncClient, Client, override_settings
from django.urls import path as url_path
from django.utils import deprecation
from rest_framework.settings import api_settings

from core import asgi as asgi_module
from core import journal, outbox
from core.asgi import ASGIHandler as ProjectASGIHandler
from core.checks import middleware_present
from notices.services import announcement_create
from tests.asgi_calls import get_scope, receive_empty_body, sent_by, unsigned
from tests.conftest import assert_error
from tests.fixtures.clients import token_for
from tests.messagecenter.conftest import send

pytestmark = pytest.mark.django_db

# Headers whose value is drawn per response (the CSP nonce) or per moment.
_VARYING = {"content-security-policy", "date"}


class Both:
    """One user's requests through the WSGI and the ASGI handler."""

    def __init__(self, user: Any | None) -> None:
        self.headers: dict[str, str] = {}
        if user is not None:
            self.headers["Authorization"] = f"Token {token_for(user)}"
        self.wsgi = Client(headers=self.headers)
        self.asgi = AsyncClient()
        self.project = ProjectASGIHandler()

    def wsgi_call(self, method: str, path: str, **extra: Any) -> Any:
        return getattr(self.wsgi, method)(path, **extra)

    def asgi_call(self, method: str, path: str, headers: dict[str, str] | None = None) -> Any:
        # (AsyncClient's own default headers do not reach the scope: passed per request.)
        return async_to_sync(getattr(self.asgi, method))(path, headers={**self.headers, **(headers or {})})

    def project_call(self, method: str, path: str, headers: dict[str, str] | None = None) -> "Answer":
        """The request through the project's ASGI handler, as a server makes it."""
        path, _, query = path.partition("?")
        pairs = {**self.headers, **(headers or {})}
        scope = get_scope(
            path,
            method=method.upper(),
            query=query,
            headers=[(name.lower().encode(), value.encode()) for name, value in pairs.items()],
        )
        return Answer.of(async_to_sync(sent_by)(self.project, scope))

    def same(self, method: str, path: str, **extra: Any) -> Any:
        """Call all three (WSGI first); assert equal answers; return the AsyncClient's."""
        wsgi = self.wsgi_call(method, path, **extra)
        for asgi in (self.asgi_call(method, path, **extra), self.project_call(method, path, **extra)):
            assert asgi.status_code == wsgi.status_code, (path, asgi.content, wsgi.content)
            # Both bodies in full on a mismatch (pytest shortens them to their ends).
            # (A cursor is signed with the second it was made in.)
            assert unsigned(asgi.content) == unsigned(wsgi.content), (
                path,
                wsgi.content.decode(),
                asgi.content.decode(),
            )
            assert _headers(asgi) == _headers(wsgi), path
        return asgi


class Answer:
    """An answer as a server got it from an ASGI application, read like the test client's."""

    def __init__(self, status_code: int, headers: list[tuple[str, str]], content: bytes) -> None:
        self.status_code, self.content = status_code, content
        # Cookies: the test client keeps them apart from the headers.
        self._headers = {name: value for name, value in headers if name.lower() != "set-cookie"}
        self.cookies = [value for name, value in headers if name.lower() == "set-cookie"]

    @classmethod
    def of(cls, sent: list[dict[str, Any]]) -> "Answer":
        start, *parts = sent
        assert start["type"] == "http.response.start", sent
        assert all(part["type"] == "http.response.body" for part in parts), sent
        assert not parts[-1].get("more_body", False), "the answer did not end"
        headers = [(name.decode("latin1"), value.decode("latin1")) for name, value in start["headers"]]
        return cls(start["status"], headers, b"".join(part.get("body", b"") for part in parts))

    def items(self) -> Any:
        return self._headers.items()

    def __getitem__(self, name: str) -> str:
        return {key.lower(): value for key, value in self._headers.items()}[name.lower()]

    def json(self) -> Any:
        return json.loads(self.content)


def _headers(response: Any) -> dict[str, str]:
    return {name.lower(): value for name, value in response.items() if name.lower() not in _VARYING}


@pytest.fixture
def data(operator: Any, recipient: Any) -> dict[str, str]:
    first = send(operator, to={"users": [recipient]}, title="One")
    send(operator, to={"users": [recipient]}, title="Two", category="promotion")
    send(operator, to={"everyone": True}, title="Everyone")
    notice = announcement_create(author=operator, title="Notice", body_html="<p>x</p>", platforms=["user"])
    return {"item": f"m{first.pk}", "announcement": str(notice.pk)}


def test_reads_are_the_same(recipient: Any, data: dict[str, str]) -> None:
    both = Both(recipient)
    page = both.same("get", "/api/v1/inbox/?limit=2").json()
    assert len(page["results"]) == 2
    assert page["next_cursor"]
    both.same("get", f"/api/v1/inbox/?limit=2&cursor={page['next_cursor']}")
    both.same("get", "/api/v1/inbox/?category=promotion&unread=true")
    counts = both.same("get", "/api/v1/inbox/counts/")
    assert counts.json()["unread"] == 3
    assert counts["ETag"]
    both.same("get", "/api/v1/announcements/")
    assert both.same("get", "/api/v1/announcements/counts/").json()["unread"] == 1
    both.same("get", f"/api/v1/announcements/{data['announcement']}/")


def test_etag_and_304_are_the_same(recipient: Any, data: dict[str, str]) -> None:
    both = Both(recipient)
    etag = both.wsgi_call("get", "/api/v1/inbox/counts/")["ETag"]
    unchanged = both.same("get", "/api/v1/inbox/counts/", headers={"If-None-Match": etag})
    assert unchanged.status_code == 304
    assert unchanged["ETag"] == etag
    # A mark through ASGI moves the ETag for both.
    assert both.asgi_call("post", f"/api/v1/inbox/{data['item']}/read/").status_code == 204
    changed = both.same("get", "/api/v1/inbox/counts/", headers={"If-None-Match": etag})
    assert changed.status_code == 200
    assert changed["ETag"] != etag


def test_marks_through_asgi_are_seen_by_wsgi(recipient: Any, data: dict[str, str]) -> None:
    both = Both(recipient)
    item, announcement = data["item"], data["announcement"]
    assert both.asgi_call("post", f"/api/v1/inbox/{item}/read/").status_code == 204
    assert both.wsgi_call("get", "/api/v1/inbox/counts/").json()["unread"] == 2
    assert both.asgi_call("post", f"/api/v1/inbox/{item}/unread/").status_code == 204
    assert both.wsgi_call("get", "/api/v1/inbox/counts/").json()["unread"] == 3
    assert both.asgi_call("post", f"/api/v1/announcements/{announcement}/read/").status_code == 204
    assert both.wsgi_call("get", "/api/v1/announcements/counts/").json() == {"read": 1, "unread": 0}
    assert both.asgi_call("post", f"/api/v1/announcements/{announcement}/unread/").status_code == 204
    assert both.wsgi_call("get", "/api/v1/announcements/counts/").json() == {"read": 0, "unread": 1}
    # The same marks through WSGI answer the same.
    for path in (f"/api/v1/inbox/{item}/read/", f"/api/v1/announcements/{announcement}/read/"):
        assert both.same("post", path).status_code == 204


def test_errors_are_the_same(recipient: Any, data: dict[str, str]) -> None:
    both = Both(recipient)
    assert_error(both.same("post", "/api/v1/inbox/m999999/read/"), 404)
    assert_error(both.same("post", "/api/v1/announcements/not-an-id/read/"), 400)
    assert_error(both.same("get", "/api/v1/inbox/?limit=zero"), 400)
    assert_error(both.same("get", "/api/v1/inbox/?cursor=forged"), 400)
    anonymous = Both(None)
    for path in ("/api/v1/inbox/", "/api/v1/inbox/counts/", "/api/v1/announcements/", "/api/v1/announcements/counts/"):
        assert_error(anonymous.same("get", path), 401)
    assert_error(anonymous.same("post", f"/api/v1/inbox/{data['item']}/read/"), 401)


def test_throttled_under_asgi_too(recipient: Any, data: dict[str, str]) -> None:
    rates = {**api_settings.DEFAULT_THROTTLE_RATES, "user": "3/min"}
    with override_settings(REST_FRAMEWORK={**_rest_framework(), "DEFAULT_THROTTLE_RATES": rates}):
        both = Both(recipient)
        statuses = [both.asgi_call("get", "/api/v1/inbox/counts/").status_code for _ in range(4)]
        assert statuses == [200, 200, 200, 429]
        assert_error(both.asgi_call("get", "/api/v1/inbox/"), 429)
        # The WSGI path counts the same history: this user is throttled there as well.
        assert_error(both.wsgi_call("get", "/api/v1/inbox/"), 429)


def _rest_framework() -> dict[str, Any]:
    from django.conf import settings

    return dict(settings.REST_FRAMEWORK)


def test_asgi_hot_path_opens_no_database_connection(
    recipient: Any, data: dict[str, str], monkeypatch: pytest.MonkeyPatch, settings: Any, request: Any
) -> None:
    both = Both(recipient)
    item = data["item"]
    hot = [
        ("get", "/api/v1/inbox/"),
        ("get", "/api/v1/inbox/counts/"),
        ("post", f"/api/v1/inbox/{item}/read/"),
        ("post", f"/api/v1/inbox/{item}/unread/"),
        # Not the announcements list nor their marks: they read the announcement
        # rows (titles, platforms) from PostgreSQL, under WSGI as well.
        ("get", "/api/v1/announcements/counts/"),
    ]
    # A mark asks PostgreSQL whether the outbox holds anything of the user's at
    # most once per EMPTY_CACHE_SECONDS per process: the warm-up's answer must
    # still hold when the hot loop marks, however slow the machine is.
    # (Its memory is dropped at both ends: the hour must not reach other tests.)
    monkeypatch.setattr(outbox, "EMPTY_CACHE_SECONDS", 3600.0)
    outbox.forget_local_state()
    request.addfinalizer(outbox.forget_local_state)
    for method, path in hot:  # warm: the credential cache, the read model's first builds
        assert both.asgi_call(method, path).status_code in (200, 204)

    used: list[str] = []

    def blocked(self: BaseDatabaseWrapper, *args: Any, **kwargs: Any) -> Any:
        used.append(self.alias)
        raise AssertionError("the hot path touched the database")

    # Marks reach the journal's buffer, written by its thread later (the test
    # settings write them within the request: here as in production), and
    # that thread is not started: the buffer is flushed below.
    settings.MESSAGECENTER_JOURNAL_FLUSH_SECONDS = 1.0
    monkeypatch.setattr(journal, "_ensure_flusher", lambda: None)
    # Any connection, cursor or query of any thread fails (and is recorded).
    monkeypatch.setattr(BaseDatabaseWrapper, "ensure_connection", blocked)
    monkeypatch.setattr(BaseDatabaseWrapper, "cursor", blocked)
    monkeypatch.setattr(BaseDatabaseWrapper, "_cursor", blocked)
    for method, path in hot:
        assert both.asgi_call(method, path).status_code in (200, 204), path
    assert used == []
    monkeypatch.undo()
    assert journal.flush() == 2  # the two marks, kept for PostgreSQL


def test_asgi_middleware_stack_switches_no_thread(
    recipient: Any, data: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Built for ASGI, the stack adapts no middleware to another mode (each
    adaptation is a thread switch per request), and no middleware hook of
    Django's runs through ``sync_to_async`` on the way."""
    adapted: list[str] = []
    original = BaseHandler.adapt_method_mode

    def watch(self: BaseHandler, is_async: bool, method: Any, method_is_async: bool | None = None, **kw: Any) -> Any:
        if method_is_async is None:
            method_is_async = iscoroutinefunction(method)
        if is_async != method_is_async:
            adapted.append(repr(method))
        return original(self, is_async, method, method_is_async, **kw)

    monkeypatch.setattr(BaseHandler, "adapt_method_mode", watch)
    handler = ASGIHandler()
    assert adapted == []
    assert iscoroutinefunction(handler._middleware_chain)

    def hook_in_thread(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a middleware hook ran through sync_to_async")

    monkeypatch.setattr(deprecation, "sync_to_async", hook_in_thread)
    both = Both(recipient)
    assert both.asgi_call("get", "/api/v1/inbox/counts/").status_code == 200
    assert both.asgi_call("post", f"/api/v1/inbox/{data['item']}/read/").status_code == 204


def test_asgi_handler_bounds_requests_running_at_once(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    """However many requests arrive together, at most the bound run their view
    at once; the others wait (and are all answered)."""
    settings.ASGI_CONCURRENT_REQUESTS = 3
    running = {"now": 0, "most": 0}

    async def slow_view(self: Any, request: Any) -> Any:
        running["now"] += 1
        running["most"] = max(running["most"], running["now"])
        await asyncio.sleep(0.01)
        running["now"] -= 1
        return HttpResponse(b"ok")

    monkeypatch.setattr(BaseHandler, "get_response_async", slow_view)
    handler = ProjectASGIHandler()

    async def burst() -> list[Any]:
        return await asyncio.gather(*(handler.run_get_response(object()) for _ in range(20)))

    answers = async_to_sync(burst)()
    assert [answer.content for answer in answers] == [b"ok"] * 20
    assert running["most"] == 3


def _asgi_get(handler: Any, path: str) -> Any:
    """One GET through an ASGI application, as a server would make it; the response's status."""
    scope = get_scope(path)
    sent: list[dict[str, Any]] = []
    receive = receive_empty_body()

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def call() -> None:
        await handler(scope, receive, send)

    return call, sent


@pytest.mark.parametrize("view_is_sync", [True, False], ids=["sync-view", "async-view"])
def test_asgi_requests_reuse_their_sync_threads(monkeypatch: pytest.MonkeyPatch, view_is_sync: bool) -> None:
    """Each request runs all its sync code on one thread, as Django expects,
    but the threads outlive the requests: requests one after the other take
    the same thread (Django alone starts and joins a new one per request),
    and requests at the same time still take different ones. Both ways
    through the handler: a sync view's whole request on its thread, and
    Django's own path (an async view's)."""
    threads: list[tuple[int, threading.Thread]] = []
    gate = threading.Barrier(2, timeout=5)
    together = {"on": False}

    def note(request: Any) -> None:
        threads.append((id(request), threading.current_thread()))
        if together["on"]:
            gate.wait()  # both requests hold their thread at once

    def sync_view(self: Any, request: Any) -> Any:
        note(request)
        note(request)
        return HttpResponse(b"ok")

    async def view(self: Any, request: Any) -> Any:
        await sync_to_async(note)(request)
        await sync_to_async(note)(request)  # the same request again: the same thread
        return HttpResponse(b"ok")

    monkeypatch.setattr(asgi_module, "runs_sync", lambda scope: view_is_sync)
    if view_is_sync:
        monkeypatch.setattr(BaseHandler, "get_response", sync_view)
    else:
        monkeypatch.setattr(BaseHandler, "get_response_async", view)
    handler = ProjectASGIHandler()

    async def one_after_another() -> None:
        for _ in range(4):
            call, sent = _asgi_get(handler, "/any/")
            await call()
            assert sent[0]["status"] == 200

    async def at_once() -> None:
        calls = [_asgi_get(handler, "/any/")[0] for _ in range(2)]
        await asyncio.gather(*(call() for call in calls))

    async_to_sync(one_after_another)()
    assert len({id(thread) for _, thread in threads}) == 1, threads
    threads.clear()
    together["on"] = True
    async_to_sync(at_once)()
    by_request: dict[int, set[int]] = {}
    for request, thread in threads:
        by_request.setdefault(request, set()).add(id(thread))
    assert len(by_request) == 2
    assert all(len(seen) == 1 for seen in by_request.values()), by_request
    assert len({next(iter(seen)) for seen in by_request.values()}) == 2


def test_a_sync_views_requests_keep_their_threads_cache_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    """Django keeps its cache backends per context: the requests a thread
    serves one after another share one backend (and its Redis client), as a
    WSGI server's thread does, instead of building one per request."""
    seen: list[tuple[int, int]] = []

    def view(self: Any, request: Any) -> Any:
        seen.append((threading.get_ident(), id(caches["default"])))
        return HttpResponse(b"ok")

    monkeypatch.setattr(asgi_module, "runs_sync", lambda scope: True)
    monkeypatch.setattr(BaseHandler, "get_response", view)
    handler = ProjectASGIHandler()
    for _ in range(3):
        call, sent = _asgi_get(handler, "/any/")
        async_to_sync(call)()
        assert sent[0]["status"] == 200
    assert len(set(seen)) == 1, seen


class _CountingExecutor(ThreadPoolExecutor):
    """A request thread that counts the calls handed to it (the thread switches)."""

    def __init__(self) -> None:
        super().__init__(1)
        self.calls = 0

    def submit(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return super().submit(*args, **kwargs)


def test_a_sync_views_request_switches_thread_once(recipient: Any, data: dict[str, str]) -> None:
    """The request signals, the middleware, the view and the close of a sync
    view's answer run in one switch to the request's thread (Django's own
    path takes three), and the answer is the WSGI handler's."""
    both = Both(recipient)
    executor = _CountingExecutor()
    both.project._idle[:] = [executor]
    finished: list[object] = []

    def on_finished(**kwargs: Any) -> None:
        finished.append(kwargs["sender"])

    signals.request_finished.connect(on_finished)
    try:
        answer = both.same("get", "/api/v1/me/")
    finally:
        signals.request_finished.disconnect(on_finished)
    assert answer.status_code == 200
    assert executor.calls == 1
    # Closed once, by the project's handler (and once each by the other two clients).
    assert finished.count(ProjectASGIHandler) == 1


def test_a_sync_views_request_answers_like_wsgi_whatever_the_outcome(recipient: Any, data: dict[str, str]) -> None:
    """A path no view serves, Django's redirect to the slash, a page with its
    cookies, a request body too big, a POST's JSON body: as under WSGI."""
    both = Both(recipient)
    assert both.project_call("get", "/no/such/page/").status_code == both.wsgi_call("get", "/no/such/page/").status_code
    moved = both.project_call("get", "/api/v1/me")
    assert (moved.status_code, moved["Location"]) == (301, "/api/v1/me/")
    login = both.project_call("get", "/accounts/login/")
    wsgi_login = Client().get("/accounts/login/")
    assert login.status_code == wsgi_login.status_code == 200
    assert [c.split("=")[0] for c in login.cookies] == list(wsgi_login.cookies)

    big = b"x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)
    scope = get_scope(
        "/api/v1/inbox/bulk/",
        method="POST",
        headers=[(b"authorization", both.headers["Authorization"].encode()), (b"content-length", b"%d" % len(big))],
    )
    assert_error(Answer.of(async_to_sync(sent_by)(both.project, scope, big)), 413)

    body = json.dumps({"action": "read", "ids": [data["item"]]}).encode()
    scope = get_scope(
        "/api/v1/inbox/bulk/",
        method="POST",
        headers=[
            (b"authorization", both.headers["Authorization"].encode()),
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(body)),
        ],
    )
    answer = Answer.of(async_to_sync(sent_by)(both.project, scope, body))
    assert answer.status_code == 200, answer.content
    assert both.wsgi_call("get", "/api/v1/inbox/counts/").json()["unread"] == 2


async def _endless_parts() -> Any:
    while True:
        yield b"tick\n"
        await asyncio.sleep(0.005)


def _endless(request: Any) -> StreamingHttpResponse:
    return StreamingHttpResponse(_endless_parts(), content_type="text/plain")


_view_loops: list[asyncio.AbstractEventLoop] = []


async def _async_view(request: Any) -> HttpResponse:
    _view_loops.append(asyncio.get_running_loop())
    return HttpResponse(b"async")


urlpatterns = [url_path("endless/", _endless), url_path("async/", _async_view)]


@override_settings(ROOT_URLCONF=__name__)
def test_a_sync_views_stream_ends_when_its_client_leaves() -> None:
    """A sync view's streaming answer is sent from the event loop until the
    client leaves; then it stops and is closed (request_finished) once."""
    handler = ProjectASGIHandler()
    sent: list[dict[str, Any]] = []
    finished: list[object] = []
    left = asyncio.Event()

    def on_finished(**kwargs: Any) -> None:
        finished.append(kwargs["sender"])

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if sum(1 for m in sent if m.get("body")) == 3:
            left.set()

    asked = {"body": False}

    async def receive() -> dict[str, Any]:
        if not asked["body"]:
            asked["body"] = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await left.wait()
        return {"type": "http.disconnect"}

    async def call() -> None:
        await asyncio.wait_for(handler(get_scope("/endless/"), receive, send), timeout=10)

    signals.request_finished.connect(on_finished)
    try:
        async_to_sync(call)()
    finally:
        signals.request_finished.disconnect(on_finished)
    assert sent[0]["status"] == 200
    assert [m["body"] for m in sent[1:4]] == [b"tick\n"] * 3
    assert finished == [ProjectASGIHandler]


@override_settings(ROOT_URLCONF=__name__)
def test_a_stream_whose_send_fails_is_still_closed() -> None:
    """A server whose send fails mid-stream (its transport broke): the error
    reaches the server, and the answer is closed (request_finished) anyway."""
    handler = ProjectASGIHandler()
    finished: list[object] = []

    def on_finished(**kwargs: Any) -> None:
        finished.append(kwargs["sender"])

    async def send(message: dict[str, Any]) -> None:
        if message.get("body"):
            raise OSError("the transport broke")

    async def call() -> None:
        await asyncio.wait_for(handler(get_scope("/endless/"), receive_empty_body(), send), timeout=10)

    signals.request_finished.connect(on_finished)
    try:
        with pytest.raises(OSError, match="transport broke"):
            async_to_sync(call)()
    finally:
        signals.request_finished.disconnect(on_finished)
    assert finished == [ProjectASGIHandler]


@override_settings(ROOT_URLCONF=__name__)
def test_an_async_view_takes_djangos_path() -> None:
    assert asgi_module.runs_sync(get_scope("/endless/"))
    assert not asgi_module.runs_sync(get_scope("/async/"))
    assert asgi_module.runs_sync(get_scope("/nothing/here/"))
    # Mounted under a prefix (the server's root_path): the path Django resolves is below it.
    mounted = {**get_scope("/mounted/async/"), "root_path": "/mounted"}
    assert not asgi_module.runs_sync(mounted)
    call, sent = _asgi_get(ProjectASGIHandler(), "/async/")
    loops: list[asyncio.AbstractEventLoop] = []

    async def served() -> None:
        loops.append(asyncio.get_running_loop())
        await call()

    _view_loops.clear()
    async_to_sync(served)()
    assert (sent[0]["status"], sent[1]["body"]) == (200, b"async")
    # Awaited on the server's own loop (the sync stack would have run it in a loop of its own).
    assert _view_loops == loops


def test_deploy_check_asks_for_the_middleware_classes(settings: Any) -> None:
    assert middleware_present(None) == []
    settings.MIDDLEWARE = [path for path in settings.MIDDLEWARE if not path.endswith(".CsrfViewMiddleware")]
    assert [warning.id for warning in middleware_present(None)] == ["core.security.W003"]
