"""The hot endpoints answer the same under ASGI as under WSGI, and an ASGI
request that needs no database opens none.

Under ASGI the middleware stack runs on the event loop (core.middleware's
inline hooks); these tests call each endpoint through Django's AsyncClient
(the ASGI handler, its middleware built in async mode) and through the
plain test client (the WSGI handler), for the same user and data, and
compare status, body and headers.
"""

import asyncio
import threading
from typing import Any

import pytest
from asgiref.sync import async_to_sync, iscoroutinefunction, sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.base import BaseHandler
from django.db.backends.base.base import BaseDatabaseWrapper
from django.http import HttpResponse
from django.test import AsyncClient, Client, override_settings
from django.utils import deprecation
from rest_framework.authtoken.models import Token
from rest_framework.settings import api_settings

from core import journal, outbox
from core.asgi import ASGIHandler as ProjectASGIHandler
from core.checks import middleware_present
from notices.services import announcement_create
from tests.asgi_calls import get_scope, receive_empty_body, unsigned
from tests.conftest import assert_error
from tests.messagecenter.conftest import send

pytestmark = pytest.mark.django_db

# Headers whose value is drawn per response (the CSP nonce) or per moment.
_VARYING = {"content-security-policy", "date"}


class Both:
    """One user's requests through the WSGI and the ASGI handler."""

    def __init__(self, user: Any | None) -> None:
        self.headers: dict[str, str] = {}
        if user is not None:
            token, _ = Token.objects.get_or_create(user=user)
            self.headers["Authorization"] = f"Token {token.key}"
        self.wsgi = Client(headers=self.headers)
        self.asgi = AsyncClient()

    def wsgi_call(self, method: str, path: str, **extra: Any) -> Any:
        return getattr(self.wsgi, method)(path, **extra)

    def asgi_call(self, method: str, path: str, headers: dict[str, str] | None = None) -> Any:
        # (AsyncClient's own default headers do not reach the scope: passed per request.)
        return async_to_sync(getattr(self.asgi, method))(path, headers={**self.headers, **(headers or {})})

    def same(self, method: str, path: str, **extra: Any) -> Any:
        """Call both (WSGI first); assert equal answers; return the ASGI one."""
        wsgi = self.wsgi_call(method, path, **extra)
        asgi = self.asgi_call(method, path, **extra)
        assert asgi.status_code == wsgi.status_code, (path, asgi.content, wsgi.content)
        # Both bodies in full on a mismatch (pytest shortens them to their ends).
        # (A cursor is signed with the second it was made in.)
        assert unsigned(asgi.content) == unsigned(wsgi.content), (path, wsgi.content.decode(), asgi.content.decode())
        assert _headers(asgi) == _headers(wsgi), path
        return asgi


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


def test_asgi_requests_reuse_their_sync_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each request runs all its sync code on one thread, as Django expects,
    but the threads outlive the requests: requests one after the other take
    the same thread (Django alone starts and joins a new one per request),
    and requests at the same time still take different ones."""
    threads: list[tuple[int, threading.Thread]] = []
    gate = threading.Barrier(2, timeout=5)
    together = {"on": False}

    async def view(self: Any, request: Any) -> Any:
        def note() -> None:
            threads.append((id(request), threading.current_thread()))
            if together["on"]:
                gate.wait()  # both requests hold their thread at once

        await sync_to_async(note)()
        await sync_to_async(note)()  # the same request again: the same thread
        return HttpResponse(b"ok")

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


def test_deploy_check_asks_for_the_middleware_classes(settings: Any) -> None:
    assert middleware_present(None) == []
    settings.MIDDLEWARE = [path for path in settings.MIDDLEWARE if not path.endswith(".CsrfViewMiddleware")]
    assert [warning.id for warning in middleware_present(None)] == ["core.security.W003"]
