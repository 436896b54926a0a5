"""Requests answered on the event loop (core/fast_asgi.py), under ASGI and WSGI.

Each test runs twice: driving the ASGI application (the fast route in front
of Django's ASGI handler) with raw ASGI messages, and the WSGI one
(core/fast_wsgi.py in front of Django's WSGI handler) with WSGI environs.
It compares what the fast route sends with what Django sends for the same
request. On a single real Redis the fast route answers a request once Django
answered that kind of request once; on the embedded fakeredis and on a Redis
Cluster it has no async client and every request goes to Django, with the
same answers.
"""

import asyncio
import io
import json
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.wsgi import WSGIHandler
from django.db import OperationalError, connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from redis.exceptions import ConnectionError as RedisConnectionError

from core import activity, authentication, fast_asgi, journal, keys, outbox, readmodel, readthrough
from core import redis as core_redis
from core.fast_asgi import FastRoutes
from core.fast_wsgi import FastWSGIRoutes
from core.models import MarkJournal
from core.redis import async_available, get_redis
from core.throttles import forget_history
from core.tokens import IssuedToken, token_digest, token_issue
from messagecenter import selectors, services
from messagecenter.insight import message_read_counts
from messagecenter.readmodel import inbox as inbox_readmodel
from notices.models import Announcement
from notices.services import announcement_create, announcement_mark_read, announcement_update
from tests.asgi_calls import get_scope, sent_by, unsigned
from tests.factories import UserFactory
from tests.fixtures.clients import token_for
from tests.messagecenter.conftest import send

pytestmark = pytest.mark.django_db

COUNTS = "/api/v1/inbox/counts/"
INBOX = "/api/v1/inbox/"
ANNOUNCEMENTS = "/api/v1/announcements/"
# Drawn per response or per moment.
_VARYING = {b"date", b"content-security-policy"}


class Django:
    """Django's ASGI handler, counting the requests that reach it."""

    def __init__(self) -> None:
        self.handler = ASGIHandler()
        self.calls = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.calls += 1
        await self.handler(scope, receive, send)


class DjangoWSGI:
    """Django's WSGI handler, counting the requests that reach it."""

    def __init__(self) -> None:
        self.handler = WSGIHandler()
        self.calls = 0

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        self.calls += 1
        return self.handler(environ, start_response)


_WSGI = (FastWSGIRoutes, DjangoWSGI, WSGIHandler)


class Answer:
    def __init__(self, messages: list[dict[str, Any]]) -> None:
        start = next(m for m in messages if m["type"] == "http.response.start")
        self.status = int(start["status"])
        self.headers = sorted(
            (bytes(n).lower(), bytes(v)) for n, v in start["headers"] if bytes(n).lower() not in _VARYING
        )
        self.body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")

    def header(self, name: bytes) -> bytes | None:
        return next((v for n, v in self.headers if n == name), None)


def call(
    app: Any, path: str, headers: dict[str, str], query: str = "", method: str = "GET", body: bytes = b""
) -> Answer:
    if isinstance(app, _WSGI):
        return _wsgi_call(app, path, headers, query, method, body)

    named = ((k.lower().encode(), v.encode()) for k, v in headers.items())
    scope = get_scope(path, headers=named, query=query, method=method)
    return Answer(async_to_sync(sent_by)(app, scope, body))


def _wsgi_call(app: Any, path: str, headers: dict[str, str], query: str, method: str, body: bytes) -> Answer:
    """``call`` as a WSGI server makes it; the answer as the ASGI messages that say the same."""
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "SCRIPT_NAME": "",
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_HOST": "testserver",
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.url_scheme": "http",
        "wsgi.version": (1, 0),
        "wsgi.multithread": False,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    for name, value in headers.items():
        environ["HTTP_" + name.upper().replace("-", "_")] = value
    started: dict[str, Any] = {}

    def start_response(status: str, sent: list[tuple[str, str]], exc_info: Any = None) -> None:
        started["status"] = int(status.split(" ", 1)[0])
        started["headers"] = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in sent]

    chunks = app(environ, start_response)
    try:
        content = b"".join(chunks)
    finally:
        if hasattr(chunks, "close"):
            chunks.close()
    return Answer(
        [
            {"type": "http.response.start", "status": started["status"], "headers": started["headers"]},
            {"type": "http.response.body", "body": content},
        ]
    )


@pytest.fixture(params=["asgi", "wsgi"])
def world(request: pytest.FixtureRequest, operator: Any, recipient: Any) -> dict[str, Any]:
    first = send(operator, to={"users": [recipient]}, title="One")
    second = send(operator, to={"users": [recipient]}, title="Two", category="promotion")
    announcement_create(author=operator, title="Notice", body_html="<p>x</p>", platforms=["user"])
    token = token_issue(user=recipient)
    forget_history(f"throttle_user_{recipient.pk}")
    django: Any = Django() if request.param == "asgi" else DjangoWSGI()
    return {
        "item": f"m{first.pk}",
        "second": second,
        "auth": {"Authorization": f"Token {token.token}"},
        "django": django,
        "app": FastRoutes(django) if request.param == "asgi" else FastWSGIRoutes(django),
        "token": token,
        "user": recipient,
        "operator": operator,
    }


def _warm(app: Any, auth: dict[str, str], path: str = COUNTS, query: str = "") -> Answer:
    """Django answers the first polls: it settles the inbox (the first read
    merges what arrived), keeps the counts in Redis's read cache and teaches
    the fast route the answer's headers. Polls from then on can go fast."""
    call(app, path, auth, query)
    return call(app, path, auth, query)


def test_a_poll_is_answered_on_the_loop_with_django_s_answer(world: dict[str, Any]) -> None:
    app, django, auth = world["app"], world["django"], world["auth"]
    first = _warm(app, auth)
    assert first.status == 200
    assert b'"total_unread":3' in first.body  # two messages and the announcement
    warm = django.calls
    # As on a new day: the fast route records the user active itself.
    day = activity.day_name(timezone.now().astimezone(UTC).date())
    chunk, offset = divmod(int(world["user"].pk), activity._chunk_size())
    activity.forget_marked()
    get_redis().delete(keys.activity_day(chunk, day))
    polls = [call(app, COUNTS, auth) for _ in range(3)]
    assert django.calls == (warm if async_available() else warm + 3)
    assert get_redis().getbit(keys.activity_day(chunk, day), offset) == 1
    for polled in polls:
        assert (polled.status, polled.body, polled.headers) == (first.status, first.body, first.headers)
    # A conditional poll: 304 with the same headers Django sends, no body.
    conditional = {**auth, "If-None-Match": first.header(b"etag").decode()}
    fast_304 = call(app, COUNTS, conditional)
    assert django.calls == (warm if async_available() else warm + 4)
    django_304 = call(django.handler, COUNTS, conditional)
    assert fast_304.status == django_304.status == 304
    assert (fast_304.body, fast_304.headers) == (django_304.body, django_304.headers)


def _polled_on_the_loop(world: dict[str, Any], path: str, query: str) -> Answer:
    """Django answers the first requests; the next is the loop's (on a single
    real Redis) with Django's status, body and headers. Returns Django's."""
    app, django, auth = world["app"], world["django"], world["auth"]
    first = _warm(app, auth, path, query)
    assert first.status == 200
    warm = django.calls
    polled = call(app, path, auth, query)
    assert django.calls == (warm if async_available() else warm + 1)
    assert (polled.status, polled.headers) == (first.status, first.headers)
    assert unsigned(polled.body) == unsigned(first.body)
    return first


@pytest.mark.parametrize("query", ["", "limit=5", "category=promotion&unread=true"])
def test_a_polled_first_page_is_answered_on_the_loop(world: dict[str, Any], query: str) -> None:
    app, django, auth = world["app"], world["django"], world["auth"]
    first = _polled_on_the_loop(world, INBOX, query)
    assert b'"results"' in first.body
    # A mark changes the page: the loop computes the next one and keeps it
    # for the poll after it, with the body Django computes.
    services.inbox_mark_read(user=world["user"], item_id=world["item"])
    calls = django.calls
    changed = call(app, INBOX, auth, query)
    assert django.calls == (calls if async_available() else calls + 1)
    assert changed.body != first.body or "promotion" in query
    assert changed.status == first.status
    assert changed.header(b"content-length") == str(len(changed.body)).encode()
    assert [h for h in changed.headers if h[0] != b"content-length"] == [
        h for h in first.headers if h[0] != b"content-length"
    ]
    again = call(app, INBOX, auth, query)
    assert (again.status, again.body) == (changed.status, changed.body)
    get_redis().delete(keys.mc_inbox_pages(world["user"].pk))
    theirs = call(django.handler, INBOX, auth, query)
    assert (theirs.status, unsigned(theirs.body)) == (changed.status, unsigned(changed.body))


def test_a_page_with_more_after_it_carries_django_s_cursor(world: dict[str, Any]) -> None:
    """A page computed on the loop names the next page as Django does, and
    that cursor walks on (Django answers a cursor)."""
    app, django, auth = world["app"], world["django"], world["auth"]
    _polled_on_the_loop(world, INBOX, "limit=1")
    send(world["operator"], to={"users": [world["user"]]}, title="Three")
    calls = django.calls
    ours = call(app, INBOX, auth, "limit=1")
    assert django.calls == (calls if async_available() else calls + 1)
    get_redis().delete(keys.mc_inbox_pages(world["user"].pk))
    theirs = call(django.handler, INBOX, auth, "limit=1")
    # The cursors are signed with the second they were made in, which may
    # differ between the two answers.
    assert (ours.status, unsigned(ours.body)) == (theirs.status, unsigned(theirs.body))
    cursor = json.loads(ours.body)["next_cursor"]
    assert b'"title":"Three"' in ours.body
    assert cursor
    after = call(app, INBOX, auth, f"limit=1&cursor={cursor}")
    assert after.status == 200
    assert b'"title":"Three"' not in after.body
    assert json.loads(after.body)["results"]


@pytest.mark.parametrize("query", ["", "limit=1"])
def test_an_announcement_page_is_answered_on_the_loop(world: dict[str, Any], query: str) -> None:
    app, django, auth = world["app"], world["django"], world["auth"]
    first = _polled_on_the_loop(world, ANNOUNCEMENTS, query)
    assert b'"title":"Notice"' in first.body
    # A new title and a mark: the next page shows both, the one after is fast again.
    notice = Announcement.objects.get(title="Notice")
    announcement_update(announcement=notice, title="Edited")
    announcement_mark_read(user=world["user"], announcement_id=notice.pk)
    changed = call(app, ANNOUNCEMENTS, auth, query)
    assert b'"title":"Edited"' in changed.body
    assert b'"read":true' in changed.body
    calls = django.calls
    again = call(app, ANNOUNCEMENTS, auth, query)
    assert (again.status, again.body, again.headers) == (changed.status, changed.body, changed.headers)
    assert django.calls == (calls if async_available() else calls + 1)


def test_an_announcement_page_with_more_after_it_is_answered_on_the_loop(world: dict[str, Any]) -> None:
    """More live announcements than the page holds: the loop's page is
    Django's, its cursor included."""
    for title in ("Second", "Third"):
        announcement_create(author=world["operator"], title=title, body_html="<p>x</p>", platforms=["user"])
    first = _polled_on_the_loop(world, ANNOUNCEMENTS, "limit=2")
    assert b'"title":"Third"' in first.body
    assert json.loads(first.body)["next_cursor"]


@pytest.mark.parametrize(
    ("path", "query", "status"),
    [
        (INBOX, "limit=0", 400),
        (INBOX, "category=nope", 400),
        (INBOX, "unread=maybe", 400),
        (INBOX, "limit=1&limit=2", 200),
        (INBOX, "cursor=abc", 400),
        (ANNOUNCEMENTS, "limit=0", 400),
        (ANNOUNCEMENTS, "cursor=abc", 400),
        (ANNOUNCEMENTS, "limit=1&limit=2", 200),
    ],
)
def test_a_page_the_loop_does_not_take_is_django_s(world: dict[str, Any], path: str, query: str, status: int) -> None:
    app, django, auth = world["app"], world["django"], world["auth"]
    _warm(app, auth, path)
    ours = call(app, path, auth, query)
    theirs = call(django.handler, path, auth, query)
    assert (ours.status, unsigned(ours.body)) == (theirs.status, unsigned(theirs.body))
    assert ours.status == status


def test_a_change_is_seen_at_the_next_poll(world: dict[str, Any]) -> None:
    app, django, auth = world["app"], world["django"], world["auth"]
    before = _warm(app, auth)
    services.inbox_mark_read(user=world["user"], item_id=world["item"])
    calls = django.calls
    after = call(app, COUNTS, auth)  # the cached counts are stale: the loop computes them (and keeps them)
    assert django.calls == (calls if async_available() else calls + 1)
    assert after.status == 200
    assert b'"total_unread":2' in after.body
    assert after.header(b"etag") != before.header(b"etag")
    theirs = call(django.handler, COUNTS, auth)
    assert (after.status, after.body, after.headers) == (theirs.status, theirs.body, theirs.headers)
    calls = django.calls
    again = call(app, COUNTS, auth)
    assert (again.body, again.headers) == (after.body, after.headers)
    assert django.calls == (calls if async_available() else calls + 1)


def test_errors_are_django_s(world: dict[str, Any]) -> None:
    app, auth = world["app"], world["auth"]
    _warm(app, auth)
    bad = call(app, COUNTS, {"Authorization": "Token " + "0" * 40})
    assert bad.status == 401
    assert b'"error"' in bad.body
    world["token"].row.delete()  # revoked: refused at once
    assert call(app, COUNTS, auth).status == 401
    assert call(app, COUNTS, {}).status == 401


def test_throttles_count_each_request_once(world: dict[str, Any]) -> None:
    app, auth, user = world["app"], world["auth"], world["user"]
    rates = {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "user": "4/min"}
    with override_settings(REST_FRAMEWORK={**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}):
        statuses = [call(app, COUNTS, auth).status for _ in range(6)]
        assert statuses == [200, 200, 200, 200, 429, 429]
        refused = call(app, COUNTS, auth)
        assert refused.status == 429
        assert int(refused.header(b"retry-after") or 0) > 0
        assert get_redis().zcard(keys.throttle(f"throttle_user_{user.pk}")) == 4
    forget_history(f"throttle_user_{user.pk}")


def test_redis_failing_on_the_loop_leaves_the_answer_to_django(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    app, django, auth = world["app"], world["django"], world["auth"]
    first = _warm(app, auth)
    call(app, COUNTS, auth)  # the token's entry is held from here on: no read of its own
    calls = django.calls

    class Refusing:
        async def get_connection(self) -> Any:
            raise RedisConnectionError("down")

    monkeypatch.setattr(core_redis, "get_async_pool", lambda: Refusing())
    polled = call(app, COUNTS, auth)
    assert (polled.status, polled.body) == (first.status, first.body)
    assert django.calls == calls + 1


def test_off_by_setting(world: dict[str, Any]) -> None:
    app, django, auth = world["app"], world["django"], world["auth"]
    with override_settings(ASGI_FAST_READS=False, WSGI_FAST_READS=False):
        for _ in range(3):
            assert call(app, COUNTS, auth).status == 200
    assert django.calls == 3


# --- marks ---------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _journal_buffered(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, db: None) -> Iterator[None]:
    """Marks on the loop need the journal's buffer (the suite writes each mark
    at once); the buffer is flushed here, in the test's transaction, rather
    than by the journal's thread (or at exit, into no test's database)."""
    if "mark" not in request.node.name:
        yield
        return
    monkeypatch.setattr(settings, "MESSAGECENTER_JOURNAL_FLUSH_SECONDS", 1.0)
    monkeypatch.setattr(journal, "_ensure_flusher", lambda: None)
    # The outbox seen empty stays known for the whole test, however slow the
    # machine: the loop takes a mark only then, and the tests say when it must.
    monkeypatch.setattr(outbox, "EMPTY_CACHE_SECONDS", 3600.0)
    yield
    journal.flush()


def _count_round_trips(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The loop's round trips from now on (the commands each carried), wherever they are sent from."""
    sent: list[int] = []
    real = core_redis.round_trip_async

    async def counting(commands: Any) -> Any:
        sent.append(len(commands))
        return await real(commands)

    for module in (core_redis, readmodel, inbox_readmodel):
        monkeypatch.setattr(module, "round_trip_async", counting)
    return sent


def _unread(app: Any, auth: dict[str, str]) -> int:
    return int(json.loads(call(app, COUNTS, auth).body)["unread"])


def test_a_mark_is_made_on_the_loop_with_django_s_answer(world: dict[str, Any]) -> None:
    app, django, auth, item = world["app"], world["django"], world["auth"], world["item"]
    read, unread = f"/api/v1/inbox/{item}/read/", f"/api/v1/inbox/{item}/unread/"
    for path in (read, unread, read, unread):  # Django answers each kind once and teaches its headers
        first = call(app, path, auth, method="POST")
        assert first.status == 204
    assert _unread(app, auth) == 2
    warm = django.calls
    journal.flush()
    journalled = MarkJournal.objects.count()
    inbox_readmodel._months_hint.clear()  # as in a process that never saw this user: no warm-up needed
    marked = call(app, read, auth, method="POST")
    assert django.calls == (warm if async_available() else warm + 1)
    assert (marked.status, marked.body, marked.headers) == (first.status, first.body, first.headers)
    assert _unread(app, auth) == 1  # Django's sync path reads what the loop wrote
    # A body (clients often send "{}") is ignored, as Django's view ignores it.
    calls = django.calls
    assert call(app, unread, auth, method="POST", body=b"{}").status == 204
    assert django.calls == (calls if async_available() else calls + 1)
    assert _unread(app, auth) == 2
    journal.flush()
    assert MarkJournal.objects.count() == journalled + 2  # each mark journalled once, in order
    last = MarkJournal.objects.order_by("-pk").first()
    assert last is not None
    assert last.payload["read"] is False


def test_a_first_read_marked_on_the_loop_is_counted_in_the_mark_s_own_round_trip(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The script queues the item's first read for its statistic itself: the
    mark costs the token's entry and two round trips (two once the entry is
    held), and the read counts once."""
    app, django, auth, second = world["app"], world["django"], world["auth"], world["second"]
    assert call(app, f"/api/v1/inbox/{world['item']}/read/", auth, method="POST").status == 204  # Django teaches
    sent = _count_round_trips(monkeypatch)
    calls = django.calls
    assert call(app, f"/api/v1/inbox/m{second.pk}/read/", auth, method="POST").status == 204
    assert django.calls == (calls if async_available() else calls + 1)
    assert len(sent) == (3 if async_available() else 0)
    assert message_read_counts(messages=[second]) == {second.pk: 1}
    # Read again (after an unread): not a first read, not counted again. The
    # token's entry is held by now: the mark's two round trips are all it costs.
    assert call(app, f"/api/v1/inbox/m{second.pk}/unread/", auth, method="POST").status == 204
    sent.clear()
    assert call(app, f"/api/v1/inbox/m{second.pk}/read/", auth, method="POST").status == 204
    assert len(sent) == (2 if async_available() else 0)
    assert message_read_counts(messages=[second]) == {second.pk: 1}


def test_a_mark_the_loop_does_not_take_is_django_s(world: dict[str, Any]) -> None:
    app, django, auth, item = world["app"], world["django"], world["auth"], world["item"]
    read = f"/api/v1/inbox/{item}/read/"
    call(app, read, auth, method="POST")
    call(app, f"/api/v1/inbox/{item}/unread/", auth, method="POST")
    # Not in the inbox: Django's 404 envelope.
    missing = call(app, "/api/v1/inbox/m999999/read/", auth, method="POST")
    assert missing.status == 404
    assert b'"error"' in missing.body
    # A query string, or a body too large to skip: Django reads (and judges) it.
    calls = django.calls
    with_query = call(app, read, auth, query="x=1", method="POST")
    assert with_query.status == 204
    large = call(app, read, auth, method="POST", body=b" " * (fast_asgi.MAX_IGNORED_BODY + 1))
    assert large.status == 204
    assert django.calls == calls + 2
    # Marks waiting in the outbox go first, through Django.
    outbox.forget_local_state()
    calls = django.calls
    assert call(app, read, auth, method="POST").status == 204
    assert django.calls == calls + 1


def test_a_write_path_is_resolved_once_while_held(world: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    app, auth, item = world["app"], world["auth"], world["item"]
    read, unread = f"/api/v1/inbox/{item}/read/", f"/api/v1/inbox/{item}/unread/"
    resolved: list[str] = []
    real = fast_asgi.resolve

    def counting(path: str) -> Any:
        resolved.append(path)
        return real(path)

    monkeypatch.setattr(fast_asgi, "resolve", counting)
    for path in (read, unread) * 3:
        assert call(app, path, auth, method="POST").status == 204
    # A path that is no write route is held as such: Django answers it each time.
    for _ in range(2):
        assert call(app, "/api/v1/inbox/mark-all-read/x/", auth, method="POST").status == 404
    expected = [read, unread, "/api/v1/inbox/mark-all-read/x/"] if async_available() else []
    assert resolved == expected
    # Past the bound, every held path is forgotten and resolved again when next asked.
    monkeypatch.setattr(fast_asgi, "MAX_HELD_WRITE_PATHS", 3)
    assert call(app, f"/api/v1/inbox/{item}/archive/", auth, method="POST").status == 204
    assert call(app, read, auth, method="POST").status == 204
    assert resolved == ([*expected, f"/api/v1/inbox/{item}/archive/", read] if async_available() else [])


def test_marks_count_against_the_throttle_once_each(world: dict[str, Any]) -> None:
    app, auth, user, item = world["app"], world["auth"], world["user"], world["item"]
    read = f"/api/v1/inbox/{item}/read/"
    call(app, read, auth, method="POST")  # teaches the headers
    forget_history(f"throttle_user_{user.pk}")
    rates = {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "user": "4/min"}
    with override_settings(REST_FRAMEWORK={**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}):
        # A mark the loop hands to Django (an item not in the inbox) is counted there, once.
        statuses = [call(app, path, auth, method="POST").status for path in [read, "/api/v1/inbox/m999999/read/"] * 3]
        assert statuses == [204, 404, 204, 404, 429, 429]
        assert get_redis().zcard(keys.throttle(f"throttle_user_{user.pk}")) == 4
    forget_history(f"throttle_user_{user.pk}")


def test_wsgi_requests_off_the_main_thread_are_django_s(recipient: Any) -> None:
    """A WSGI server's other threads (runserver's, a threaded worker's) have
    no loop of the fast route: Django answers every request there."""
    auth = {"Authorization": f"Token {token_for(recipient)}"}
    django = DjangoWSGI()
    app = FastWSGIRoutes(django)
    answers: list[Answer] = []
    worker = threading.Thread(target=lambda: answers.extend(call(app, COUNTS, auth) for _ in range(3)))
    worker.start()
    worker.join()
    # (Whatever the thread's own database connection makes of the token.)
    assert len(answers) == 3
    assert django.calls == 3
    forget_history(f"throttle_user_{recipient.pk}")


def test_a_refused_mark_changes_nothing(world: dict[str, Any]) -> None:
    """The throttle's count rides on the mark's first round trip (which only
    reads): a refusal stops the mark before it writes."""
    app, auth, user, item = world["app"], world["auth"], world["user"], world["item"]
    read, unread = f"/api/v1/inbox/{item}/read/", f"/api/v1/inbox/{item}/unread/"
    call(app, read, auth, method="POST")  # Django answers each kind once and teaches its headers
    call(app, unread, auth, method="POST")
    forget_history(f"throttle_user_{user.pk}")
    rates = {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "user": "1/min"}
    with override_settings(REST_FRAMEWORK={**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}):
        assert call(app, read, auth, method="POST").status == 204
        assert selectors.inbox_counts(user=user)["unread"] == 1
        refused = call(app, unread, auth, method="POST")
        assert refused.status == 429
        assert b'"error"' in refused.body
        assert selectors.inbox_counts(user=user)["unread"] == 1  # still read
        assert get_redis().zcard(keys.throttle(f"throttle_user_{user.pk}")) == 1
    forget_history(f"throttle_user_{user.pk}")


def test_a_poll_on_the_loop_makes_two_round_trips_then_one(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token new to the process: its entry, then the answer with the
    throttle's count in the same write. From then on the entry is held and
    read again in that same write: one round trip (no async client: Django
    answers, none on the loop)."""
    app, django, auth = world["app"], world["django"], world["auth"]
    _warm(app, auth)
    app.core._tokens.clear()  # as in a process that never saw this token
    sent = _count_round_trips(monkeypatch)
    calls = django.calls
    polled = call(app, COUNTS, auth)
    assert polled.status == 200
    assert len(sent) == (2 if async_available() else 0)
    sent.clear()
    again = call(app, COUNTS, auth)
    assert (again.status, again.body) == (polled.status, polled.body)
    assert len(sent) == (1 if async_available() else 0)
    assert django.calls == (calls if async_available() else calls + 2)


def test_a_held_token_whose_entry_changed_is_django_s(world: dict[str, Any]) -> None:
    """The held entry is read again with the answer's round trip: a token
    revoked or a user deactivated meanwhile (each rewrites the entry) is
    answered by Django, never from what the process held."""
    app, django, auth, user = world["app"], world["django"], world["auth"], world["user"]
    _warm(app, auth)
    assert call(app, COUNTS, auth).status == 200  # held from here on
    calls = django.calls
    user.is_active = False
    user.save()
    refused = call(app, COUNTS, auth)
    assert refused.status == 401
    assert django.calls == calls + 1
    # Active again: the deactivation ended the user's tokens, so the held one
    # stays refused (by Django); a token issued since is answered on the loop.
    user.is_active = True
    user.save()
    calls = django.calls
    assert call(app, COUNTS, auth).status == 401
    assert django.calls == calls + 1
    auth = {"Authorization": f"Token {token_for(user)}"}
    assert call(app, COUNTS, auth).status == 200
    calls = django.calls
    assert call(app, COUNTS, auth).status == 200
    assert django.calls == (calls if async_available() else calls + 1)


def test_a_held_token_counts_against_the_throttle_once_and_a_refusal_takes_nothing(world: dict[str, Any]) -> None:
    app, auth, user = world["app"], world["auth"], world["user"]
    _warm(app, auth)
    call(app, COUNTS, auth)  # held from here on
    forget_history(f"throttle_user_{user.pk}")
    rates = {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "user": "3/min"}
    with override_settings(REST_FRAMEWORK={**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}):
        statuses = [call(app, COUNTS, auth).status for _ in range(5)]
        assert statuses == [200, 200, 200, 429, 429]
        assert get_redis().zcard(keys.throttle(f"throttle_user_{user.pk}")) == 3
    forget_history(f"throttle_user_{user.pk}")


def test_without_throttle_rates_the_loop_still_answers(world: dict[str, Any]) -> None:
    app, django, auth = world["app"], world["django"], world["auth"]
    rates = {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "user": None}
    with override_settings(REST_FRAMEWORK={**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}):
        first = _warm(app, auth)
        calls = django.calls
        polled = call(app, COUNTS, auth)
    assert (polled.status, polled.body) == (first.status, first.body)
    assert django.calls == (calls if async_available() else calls + 1)


# --- a token's first request since its entry expired ----------------------------------------


def _entry(token: IssuedToken) -> str:
    """The Redis key of the token's authentication entry (named by its digest)."""
    return keys.auth_token(token_digest(token.token))


def _forget_token(app: Any, token: IssuedToken) -> None:
    """As in a process that never saw the token, after its entry expired in Redis."""
    get_redis().delete(_entry(token))
    app.core._tokens.clear()


@pytest.mark.parametrize("path", [COUNTS, INBOX, ANNOUNCEMENTS])
def test_a_token_redis_no_longer_holds_is_filled_and_answered_on_the_loop(world: dict[str, Any], path: str) -> None:
    """Filled as Django's authentication fills it (one query, the entry then
    in Redis for everyone), then answered on the loop: not a whole Django
    request for the token's first poll."""
    app, django, auth, token = world["app"], world["django"], world["auth"], world["token"]
    first = _warm(app, auth, path)
    _forget_token(app, token)
    calls = django.calls
    with CaptureQueriesContext(connection) as queries:
        polled = call(app, path, auth)
    assert django.calls == (calls if async_available() else calls + 1)
    if async_available():
        assert len(queries) == 1, [q["sql"] for q in queries]  # the fill
    assert (polled.status, polled.headers) == (first.status, first.headers)
    assert unsigned(polled.body) == unsigned(first.body)
    entry = readthrough.parse(get_redis().get(_entry(token)))
    assert entry.fresh()
    assert entry.value["id"] == world["user"].pk
    calls = django.calls
    with CaptureQueriesContext(connection) as queries:
        assert call(app, path, auth).status == 200
    assert django.calls == (calls if async_available() else calls + 1)
    if async_available():
        assert len(queries) == 0


@pytest.mark.parametrize("world", ["asgi"], indirect=True)  # the WSGI route fills in place
def test_fills_under_a_server_run_side_by_side_on_the_loops_executor(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a server (no sync caller waiting above the loop) token fills go to
    the loop's default executor, several at once, not one thread for the
    whole process; each is answered on the loop as above."""
    app, django, auth, token = world["app"], world["django"], world["auth"], world["token"]
    # Two users: two fills of one token would meet its fill lock (one of them then goes to Django).
    other = token_issue(user=UserFactory())
    auths = [auth, {"Authorization": f"Token {other.token}"}]
    for each in auths:
        _warm(app, each)
    threads: list[str] = []
    both_in = threading.Barrier(2, timeout=5)
    original = fast_asgi.fill_token

    def fill(key: str | None) -> Any:
        threads.append(threading.current_thread().name)
        both_in.wait()  # two fills at the same time, or this times out
        return original(key)

    monkeypatch.setattr(fast_asgi, "fill_token", fill)
    _forget_token(app, token)
    _forget_token(app, other)
    calls = django.calls

    async def two_polls() -> list[list[dict[str, Any]]]:
        scopes = [get_scope(COUNTS, headers=[(b"authorization", each["Authorization"].encode())]) for each in auths]
        return list(await asyncio.gather(*(sent_by(app, scope) for scope in scopes)))

    # asyncio.run on a thread of its own: an event loop as a server runs it.
    with ThreadPoolExecutor(1, thread_name_prefix="server") as server:
        answers = server.submit(asyncio.run, two_polls()).result(timeout=30)
    assert [Answer(sent).status for sent in answers] == [200, 200]
    for each in (token, other):
        assert readthrough.parse(get_redis().get(_entry(each))).fresh()
    if async_available():
        assert django.calls == calls
        assert len(threads) == 2, threads
        assert not any(name.startswith("server") for name in threads), threads
    else:  # no async client (embedded, a cluster): Django answers both, no route fills
        assert django.calls == calls + 2
        assert threads == []


def test_a_filled_token_that_has_no_owner_is_refused_by_django(world: dict[str, Any]) -> None:
    """The fill remembers the miss; Django answers the refusal (and finds the
    miss without reading PostgreSQL again)."""
    app, django, auth, token = world["app"], world["django"], world["auth"], world["token"]
    _warm(app, auth)
    bad = "Token " + "1" * 40
    calls = django.calls
    refused = call(app, COUNTS, {"Authorization": bad})
    assert refused.status == 401
    assert b'"error"' in refused.body
    assert django.calls == calls + 1
    assert readthrough.parse(get_redis().get(keys.auth_token(token_digest("1" * 40)))).found
    # An inactive owner: filled, then refused by Django too.
    _forget_token(app, token)
    user = world["user"]
    type(user).objects.filter(pk=user.pk).update(is_active=False)
    calls = django.calls
    assert call(app, COUNTS, auth).status == 401
    assert django.calls == calls + 1


@pytest.mark.parametrize(
    ("broken", "status"),
    [
        # A defect of the fill itself: Django's own authentication still answers.
        ((fast_asgi, "token_entry_fill"), 200),
        # PostgreSQL down: Django answers as it answers any request then.
        ((authentication, "_owner_snapshot"), 503),
    ],
    ids=["fill-broken", "postgresql-down"],
)
def test_a_token_whose_fill_fails_is_django_s(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch, broken: tuple[Any, str], status: int
) -> None:
    app, django, auth, token = world["app"], world["django"], world["auth"], world["token"]
    first = _warm(app, auth)
    _forget_token(app, token)

    def failing(key: str) -> Any:
        raise OperationalError("connection refused") if status == 503 else RuntimeError("the fill broke")

    monkeypatch.setattr(*broken, failing)
    calls = django.calls
    answer = call(app, COUNTS, auth)
    assert answer.status == status
    assert django.calls == calls + 1
    if status == 200:
        assert answer.body == first.body
    else:
        assert get_redis().get(_entry(token)) is None  # the fill stored nothing


def _a_new_day(user: Any) -> tuple[str, int]:
    """As on a new day: nobody marked the user active; the day's key and the user's bit."""
    day = activity.day_name(timezone.now().astimezone(UTC).date())
    chunk, offset = divmod(int(user.pk), activity._chunk_size())
    activity.forget_marked()
    get_redis().delete(keys.activity_day(chunk, day))
    return keys.activity_day(chunk, day), offset


def test_a_user_s_first_poll_of_the_day_is_marked_in_the_answer_s_round_trip(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    app, auth, user = world["app"], world["auth"], world["user"]
    _warm(app, auth)
    call(app, COUNTS, auth)  # the token's entry is held from here on
    day_key, offset = _a_new_day(user)
    sent = _count_round_trips(monkeypatch)
    assert call(app, COUNTS, auth).status == 200
    assert get_redis().getbit(day_key, offset) == 1
    # The answer's commands with the throttle, the held entry and the mark ahead of them: one write.
    assert len(sent) == (1 if async_available() else 0)
    day = activity.day_name(timezone.now().astimezone(UTC).date())
    assert activity._marked.seen(day, user.pk)  # the process knows: the next poll sends no mark


def test_a_mark_for_the_day_redis_refuses_leaves_the_request_to_django(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its script not loaded yet (a flushed Redis): Django answers and its sync call loads and marks."""
    app, django, auth, user = world["app"], world["django"], world["auth"], world["user"]
    first = _warm(app, auth)
    day_key, offset = _a_new_day(user)
    monkeypatch.setattr(readmodel, "activity_mark_command", lambda **_: ("EVALSHA", "0" * 40, 0))
    calls = django.calls
    polled = call(app, COUNTS, auth)
    assert (polled.status, polled.body) == (first.status, first.body)
    assert django.calls == calls + 1
    assert get_redis().getbit(day_key, offset) == 1  # by Django's authentication
