"""The ASGI application (config/asgi.py): Django's own handler behind the
lifespan protocol. Every request goes through Django's middleware, its URL
resolver and one view, and answers as under WSGI: these tests call each hot
endpoint through Django's AsyncClient, through ``config.asgi.application`` as
a server calls it and through the plain test client (the WSGI handler), for
the same user and data, and compare status, body and headers.
"""

import asyncio
import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.db.backends.base.base import BaseDatabaseWrapper
from django.test import AsyncClient, Client

from config import asgi as asgi_config
from durability import outbox
from live import transport as live
from notices.services import announcement_create
from tests.asgi_calls import get_scope, sent_by, unsigned
from tests.conftest import assert_error
from tests.fixtures.clients import token_for
from tests.fixtures.throttles import throttle_rates
from tests.messagecenter.conftest import send

pytestmark = pytest.mark.django_db(transaction=True)

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
        self.project = asgi_config.application

    def wsgi_call(self, method: str, path: str, **extra: Any) -> Any:
        return getattr(self.wsgi, method)(path, **extra)

    def asgi_call(self, method: str, path: str, headers: dict[str, str] | None = None) -> Any:
        # (AsyncClient's own default headers do not reach the scope: passed per request.)
        return async_to_sync(getattr(self.asgi, method))(path, headers={**self.headers, **(headers or {})})

    def project_call(self, method: str, path: str, headers: dict[str, str] | None = None) -> "Answer":
        """The request through config.asgi.application, as a server makes it."""
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
    with throttle_rates({"user": "3/min"}, clients=(f"throttle_user_{recipient.pk}",)):
        both = Both(recipient)
        statuses = [both.asgi_call("get", "/api/v1/inbox/counts/").status_code for _ in range(4)]
        assert statuses == [200, 200, 200, 429]
        assert_error(both.project_call("get", "/api/v1/inbox/"), 429)
        # The WSGI path counts the same window: this user is throttled there as well.
        assert_error(both.wsgi_call("get", "/api/v1/inbox/"), 429)


def test_asgi_hot_path_opens_no_database_connection(
    recipient: Any, data: dict[str, str], monkeypatch: pytest.MonkeyPatch, settings: Any, request: Any
) -> None:
    both = Both(recipient)
    hot = [
        ("get", "/api/v1/inbox/"),
        ("get", "/api/v1/inbox/counts/"),
        # Not the marks: each commits to PostgreSQL before its answer. Nor the
        # announcements list: it reads the announcement rows (titles,
        # platforms) from PostgreSQL, under WSGI as well.
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

    # Any connection, cursor or query of any thread fails (and is recorded).
    monkeypatch.setattr(BaseDatabaseWrapper, "ensure_connection", blocked)
    monkeypatch.setattr(BaseDatabaseWrapper, "cursor", blocked)
    monkeypatch.setattr(BaseDatabaseWrapper, "_cursor", blocked)
    for method, path in hot:
        assert both.asgi_call(method, path).status_code in (200, 204), path
    assert used == []
    monkeypatch.undo()


def test_answers_like_wsgi_whatever_the_outcome(recipient: Any, data: dict[str, str]) -> None:
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


def test_every_request_goes_through_djangos_middleware_and_resolver(recipient: Any) -> None:
    both = Both(recipient)
    answer = both.project_call("get", "/api/v1/inbox/counts/")
    assert answer.status_code == 200
    # Headers only Django's middleware adds (security, clickjacking, CSP).
    assert answer["X-Content-Type-Options"] == "nosniff"
    assert answer["X-Frame-Options"] == "DENY"
    assert answer["Content-Security-Policy"]
    # The URL resolver: no pattern, Django's 404; no slash, CommonMiddleware's redirect.
    assert both.project_call("get", "/api/v1/no-such-endpoint/").status_code == 404
    moved = both.project_call("get", "/api/v1/inbox/counts")
    assert (moved.status_code, moved["Location"]) == (301, "/api/v1/inbox/counts/")


class Lifespan:
    """A server's side of the lifespan protocol: the messages it sends, those it got back."""

    def __init__(self) -> None:
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.sent: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        return await self.inbox.get()

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    async def run(self) -> list[str]:
        """Startup, then shutdown, through the application; the answers' types."""
        task = asyncio.create_task(
            # ASGI's scope, receive and send as a server passes them; the project's application types them narrower.
            asgi_config.application({"type": "lifespan", "asgi": {"version": "3.0"}}, self.receive, self.send)  # type: ignore[arg-type]
        )
        await self.inbox.put({"type": "lifespan.startup"})
        await self.inbox.put({"type": "lifespan.shutdown"})
        await asyncio.wait_for(task, timeout=10)
        return [message["type"] for message in self.sent]


def test_lifespan_starts_up_and_closes_the_live_hub_at_shutdown() -> None:
    async def scenario() -> tuple[list[str], bool]:
        hub = live.hub()  # the loop's hub, as a stream would have started it
        answers = await Lifespan().run()
        return answers, live.hub() is not hub  # closed and forgotten: a new one would be made

    answers, closed = asyncio.run(scenario())
    assert answers == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert closed


def test_a_failed_shutdown_is_reported_to_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    async def failing() -> None:
        raise RuntimeError("the hub would not close")

    monkeypatch.setattr(asgi_config, "hub_close", failing)
    lifespan = Lifespan()
    assert asyncio.run(lifespan.run()) == ["lifespan.startup.complete", "lifespan.shutdown.failed"]
    assert "would not close" in lifespan.sent[-1]["message"]
