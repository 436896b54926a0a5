"""Answers to the hottest API reads on the event loop, in front of Django (ASGI).

Under ASGI, Django runs each request's sync code (its request signals, the
middleware, the DRF view) on a thread and awaits it: three hops a request,
and the event loop's own work besides, where a WSGI worker just calls the
view. A bell polling its counts pays all of it for one round trip to Redis.

An app registers an async handler for one of its URL names (``register``):
a read (``GET``) or a write that takes no input (``POST``, an inbox mark). For
such a request with an API token, this route authenticates from the token's
Redis read-through entry (the entry ``core.authentication`` keeps) and asks
the handler for the answer: ``redis.asyncio`` round trips on the event loop,
no thread, no PostgreSQL connection. The request is counted against the
view's throttles in the same write as the handler's first round trip
(``core.redis.Ahead``); a refusal stops the handler right there. A token
this process authenticated before is not read on its own either: its entry
is held here, and the same write reads it again; the answer stands only if
Redis still holds that entry byte for byte (a revoked token, a changed or
deactivated user rewrite it), so a poll costs one round trip and a mark
two. A write handler's first round trip only reads, so
a refused write changes nothing. A request the handler leaves to Django is
taken back from the window, and Django counts it: every request counts once.
Under WSGI, ``core.fast_wsgi`` puts the same route in front of Django.

A token whose entry Redis does not hold fresh (its first request since the
entry expired, was dropped or was invalidated) is filled by the route itself,
under the rules of authentication's own fill (``fill_token``: one query, the
fill lock, nothing stored over an invalidation), on the process's sync
thread under ASGI and in place under WSGI; the request is then answered
here. Without this, every user's first request after a restart or an expiry
paid a whole Django request just to authenticate.

Like the event stream's route (core/live_asgi.py) it only ever serves the
success case. Everything else goes to Django, which answers as it always
does: no token or a session, a token with no owner (the fill remembers
that miss) or whose fill found another process filling it, an inactive
user, Redis failing
or not known to hold a ready read model, a throttle's refusal, a query
string the handler does not take, a view with permissions or throttles this route does not know, or a
handler that cannot answer on the loop. So the two paths cannot disagree on
an error, and what needs PostgreSQL or a sync Redis call still gets it.

The answer's headers are the ones Django sent with the last successful
answer of the same route and method to the same language inputs and scheme
(learned as it passed through: security headers, CSP, Vary,
Content-Language, Allow); only the length and the handler's own headers (an
ETag) are the answer's. The first request of each kind therefore goes to
Django.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qsl

from asgiref.sync import AsyncToSync, sync_to_async
from django.conf import settings
from django.db import DatabaseError, close_old_connections
from django.urls import Resolver404, resolve, reverse
from django.utils import timezone
from redis.exceptions import RedisError
from rest_framework.permissions import IsAuthenticated

from core import activity, healing, keys, metrics, readmodel
from core.authentication import TokenAuthentication, token_entry_fill
from core.breaker import any_open
from core.readmodel import THROTTLE_SCRIPT, throttle_args
from core.readthrough import Entry, parse
from core.redis import Ahead, async_available, round_trip_async, sent_ahead
from core.throttles import AnonRateThrottle, UserRateThrottle
from core.tokens import token_auth, token_digest

logger = logging.getLogger(__name__)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True)
class FastRequest:
    user_id: int
    platforms: tuple[str, ...]
    headers: Mapping[bytes, bytes]  # lower-case names, as ASGI gives them
    query: Mapping[str, str]  # the query string's parameters (each given once)
    now: datetime
    kwargs: Mapping[str, Any] = field(default_factory=dict)  # the URL's captured values (a write's item id)


@dataclass(frozen=True)
class FastAnswer:
    status: int  # a success: 200 (204 for a write), or 304 for a conditional GET
    body: bytes = b""
    headers: tuple[tuple[bytes, bytes], ...] = ()  # the answer's own (an ETag)


Handler = Callable[[FastRequest], Awaitable[FastAnswer | None]]

# ``FastCore.answer``'s reply when Redis holds no fresh entry for the token
# (its first request since the entry expired or was dropped): Django's
# authentication fills it, or the WSGI front, whose sync worker may read
# PostgreSQL, fills it and asks again with it (core/fast_wsgi.py).
TOKEN_NOT_FRESH = FastAnswer(status=0)

# Handlers by (method, URL name), registered by the apps (their AppConfig.ready).
_handlers: dict[tuple[str, str], Handler] = {}
# The methods a route answers, and the success it learns Django's headers from.
_SUCCESS = {"GET": 200, "POST": 204}

# Headers that belong to one answer, never to the learned set.
_OWN_HEADERS = frozenset({b"content-length", b"etag", b"set-cookie", b"date", b"server", b"last-modified"})
# Learned header sets kept at most (language inputs vary by client): all are
# forgotten when one more comes, and the next requests teach them again.
MAX_LEARNED = 512
# Token entries held at most (a few hundred bytes each); all are forgotten
# when one more comes, and each token's next request reads its entry again.
MAX_HELD_TOKENS = 20_000
# Write paths whose resolution is held (a few hundred bytes each): a mark's
# path holds its item's id, so Django's resolver would otherwise try the
# project's URL patterns one by one for every mark. All are forgotten when
# one more comes. Marks cluster on the items just delivered (a broadcast's
# id is the same in every inbox), so most find theirs held.
MAX_HELD_WRITE_PATHS = 10_000


def _hold(store: dict[Any, Any], limit: int, key: Any, value: Any) -> None:
    """Keep ``value`` under ``key``, forgetting everything first once ``limit`` entries are held."""
    if len(store) >= limit:
        store.clear()
    store[key] = value


def register(url_name: str, handler: Handler, *, method: str = "GET") -> None:
    """Answer ``method`` (``GET``, or ``POST`` of a view that reads no body) of
    the URL named ``url_name`` with ``handler`` when it can. A ``POST``
    handler's first round trip must change nothing: the throttle's count
    rides on it, and a refusal is only known once it is back."""
    if method not in _SUCCESS:
        raise ValueError(f"the fast route answers {sorted(_SUCCESS)}, not {method}")
    _handlers[(method, url_name)] = handler


@dataclass(frozen=True)
class _Route:
    handler: Handler
    pattern: str  # the URL pattern, as /metrics labels Django's answers
    view: Any  # the DRF view class: its throttles are read per request
    write: bool = False


def token_of(authorization: bytes | None) -> str | None:
    """The digest of the request's API token (core/tokens.py): this route
    names, holds and fills tokens by digest only."""
    if not authorization:
        return None
    keyword, _, key = authorization.decode("latin-1").partition(" ")
    key = key.strip()
    if keyword != TokenAuthentication.keyword or not key or " " in key:
        return None
    return token_digest(key)


def _query(raw: bytes) -> dict[str, str] | None:
    """The query string's parameters; None (Django answers) when one is given twice or is not UTF-8."""
    if not raw:
        return {}
    try:
        pairs = parse_qsl(raw.decode(), keep_blank_values=True, strict_parsing=True, errors="strict")
    except (UnicodeDecodeError, ValueError):
        return None
    query = dict(pairs)
    return query if len(query) == len(pairs) else None


def _view_of(match: Any) -> Any:
    """The DRF view class a URL resolved to (None: a plain Django view)."""
    return getattr(match.func, "view_class", None) or getattr(match.func, "cls", None)


def _fits(view: Any) -> bool:
    """Whether this route applies the view's checks exactly: token first,
    ``IsAuthenticated`` only, the project's throttles only."""
    authentication = list(getattr(view, "authentication_classes", ()))
    permissions = list(getattr(view, "permission_classes", ()))
    throttles = list(getattr(view, "throttle_classes", ()))
    return (
        bool(authentication)
        and authentication[0] is TokenAuthentication
        and permissions == [IsAuthenticated]
        and all(t in (UserRateThrottle, AnonRateThrottle) for t in throttles)
    )


class FastCore:
    """What the fast route does whatever the server: which requests it may
    take, the headers learned from Django's answers, and the answer itself.
    ``FastRoutes`` (ASGI, here) and ``core.fast_wsgi.FastWSGIRoutes`` (WSGI)
    adapt their server's request and response to it."""

    def __init__(self) -> None:
        self._routes: dict[str, _Route] | None = None
        self._learned: dict[tuple[Any, ...], list[tuple[bytes, bytes]]] = {}
        # Token -> its read-through entry as this process last read it (fresh then).
        self._tokens: dict[str, Entry] = {}
        # Path of a POST -> its write route and the URL's captured values (None: Django's).
        self._write_paths: dict[str, tuple[_Route, Mapping[str, Any]] | None] = {}

    def _by_path(self) -> dict[str, _Route]:
        if self._routes is None:
            routes: dict[str, _Route] = {}
            for (method, name), handler in _handlers.items():
                if method != "GET":
                    continue
                path = reverse(name)
                match = resolve(path)
                view = _view_of(match)
                if view is not None and _fits(view):
                    routes[path] = _Route(handler, match.route, view)
            self._routes = routes
        return self._routes

    def _write_route(self, path: str) -> tuple[_Route, Mapping[str, Any]] | None:
        """The write route of ``path`` (its URL holds an id: resolved once per path held)."""
        if path not in self._write_paths:
            _hold(self._write_paths, MAX_HELD_WRITE_PATHS, path, self._resolve_write(path))
        return self._write_paths[path]

    @staticmethod
    def _resolve_write(path: str) -> tuple[_Route, Mapping[str, Any]] | None:
        if not any(method == "POST" for method, _ in _handlers):
            return None
        try:
            match = resolve(path)
        except Resolver404:
            return None
        handler = _handlers.get(("POST", match.url_name or ""))
        view = _view_of(match)
        if handler is None or view is None or not _fits(view):
            return None
        # Read-only: the same values serve every request to this path.
        return _Route(handler, match.route, view, write=True), MappingProxyType(dict(match.kwargs))

    def route(self, method: str, path: str) -> tuple[_Route, Mapping[str, Any]] | None:
        """The route of a request (with the URL's captured values), or None: Django's."""
        if not async_available():
            return None
        if method == "GET":
            route = self._by_path().get(path)
            return (route, {}) if route is not None else None
        if method == "POST":
            return self._write_route(path)
        return None

    def learned(self, learn_as: tuple[Any, ...]) -> list[tuple[bytes, bytes]] | None:
        """Django's headers for answers of this kind, once one passed through."""
        return self._learned.get(learn_as)

    def learn(self, learn_as: tuple[Any, ...], status: int, headers: list[tuple[bytes, bytes]]) -> None:
        """Keep the headers of Django's answer if it is the route's success
        and sets no cookie (lower-case names)."""
        if status != _SUCCESS[learn_as[1]] or any(n == b"set-cookie" for n, _ in headers):
            return
        _hold(self._learned, MAX_LEARNED, learn_as, [(n, v) for n, v in headers if n not in _OWN_HEADERS])

    async def answer(
        self,
        route: _Route,
        token: str | None,
        headers: Mapping[bytes, bytes],
        raw_query: bytes,
        kwargs: Mapping[str, Any],
        entry: Entry | None = None,
    ) -> FastAnswer | None:
        """The answer on the loop, or None: Django answers (whatever failed on
        the way: Django's path has the breaker and the fallbacks), or
        ``TOKEN_NOT_FRESH`` (never when ``entry``, the token's entry as the
        caller just filled it, is given; read from Redis otherwise)."""
        query = _query(raw_query)
        if token is None or query is None:
            return None
        try:
            return await self._answer(route, token, headers, query, kwargs, entry)
        except (RedisError, OSError, TimeoutError):
            return None
        except Exception:
            # A defect of a handler: logged, and the request still gets Django's answer, not a 500.
            logger.exception("fast route %s failed; Django answers", route.pattern)
            return None

    async def _answer(
        self,
        route: _Route,
        token: str,
        headers: Mapping[bytes, bytes],
        query: Mapping[str, str],
        kwargs: Mapping[str, Any],
        filled: Entry | None,
    ) -> FastAnswer | None:
        if any_open() or not healing.known_ready():
            return None
        now = timezone.now()
        held = self._tokens.get(token)
        if filled is not None:
            entry, held = filled, None
        elif held is not None and held.fresh():
            entry = held  # read again with the handler's first round trip
        else:
            entry = parse(await readmodel.cache_entry_get_async(key=keys.auth_token(token)))
            held = None
        if not entry.fresh():
            return TOKEN_NOT_FRESH if filled is None else None
        fields = entry.value
        if not isinstance(fields, dict):
            return None
        platforms = fields.get("platforms")
        if not fields.get("is_active") or not isinstance(platforms, list):
            return None
        if token_auth(fields.get("token"), now) is None:
            return None  # expired: Django answers the 401
        user_id = int(fields["id"])
        # The user's first request of the day in this process records them
        # active in that same write too.
        mark = activity.pending_mark(user_id=user_id, now=now)
        request = FastRequest(user_id, tuple(platforms), headers, query, now, kwargs)
        # The request is counted against the view's throttles in the same
        # write as the handler's first round trip, and a refusal stops the
        # handler there: a write handler's first round trip only reads, so a
        # refused write changes nothing. Whatever the handler leaves to Django
        # is taken back from the window, and Django counts it: once each.
        counting = _Counting(
            route.view,
            user_id,
            held=(token, held.raw) if held is not None and held.raw else None,
            mark=mark.command if mark is not None else None,
        )
        try:
            with sent_ahead(Ahead(counting.commands, counting.check)) as ahead:
                answer = await route.handler(request)
        except _Refused:
            answer = None
        except (RedisError, OSError, TimeoutError):
            answer = None
        except Exception:
            logger.exception("fast route %s failed; Django answers", route.pattern)
            answer = None
        replies = ahead.replies
        if not ahead.taken:  # the handler made no round trip: counted (and the token checked) now
            if answer is None:
                return None
            replies = await round_trip_async(counting.commands)
        if mark is not None and counting.marked(replies):
            mark.done()
        if counting.token_changed(replies):
            self._tokens.pop(token, None)  # Django reads it again (and answers a revoked token)
        elif held is None:
            _hold(self._tokens, MAX_HELD_TOKENS, token, entry)
        if answer is None or not counting.allowed(replies):
            await _uncount(counting.counted(replies))
            return None
        return answer


def fill_token(token: str | None) -> Entry | None:
    """The token's entry filled from PostgreSQL as Django's authentication
    would fill it, for a request that met ``TOKEN_NOT_FRESH`` (sync: a WSGI
    worker calls it as it is, the ASGI route on a thread), the connection then
    handed back as at the end of a request. None when no fresh entry is known
    or the fill failed: Django answers, meeting the same state again. A
    token's first request since its entry expired thus costs the fill, not
    Django's whole request besides."""
    if token is None:
        return None
    try:
        return token_entry_fill(token)
    except DatabaseError:
        # PostgreSQL unavailable: Django's answer (a 503) says so; no log line per request.
        logger.debug("fast route: token entry not filled; Django answers", exc_info=True)
        return None
    except Exception:
        logger.warning("fast route: token entry not filled; Django answers", exc_info=True)
        return None
    finally:
        close_old_connections()


def learn_key(route: _Route, method: str, scheme: str | None, headers: Mapping[bytes, bytes]) -> tuple[Any, ...]:
    """What Django's headers for an answer depend on: the route, the method,
    the scheme and the language inputs (the header and the cookie)."""
    return (route.pattern, method, scheme, headers.get(b"accept-language"), headers.get(b"cookie"))


def answer_headers(answer: FastAnswer, learned: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The headers of an answer given on the loop: Django's learned ones, its length and its own."""
    sent = [(n, v) for n, v in learned if answer.status != 304 or n != b"content-type"]
    if answer.status != 204:  # a 204 carries no length (nor a body)
        sent.append((b"content-length", str(len(answer.body)).encode()))
    return sent + list(answer.headers)


def count_outcome(route: _Route, method: str, answered: bool) -> None:
    metrics.FAST_ROUTE.labels(route=route.pattern, method=method, outcome="answered" if answered else "django").inc()


class FastRoutes:
    """``application = FastRoutes(django_application)``."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.core = FastCore()

    @staticmethod
    async def _fill(token: str | None) -> Entry | None:
        """``fill_token`` on a thread of the loop's default executor: fills side
        by side, each thread keeping Django's cache connections in its own
        context. (A bare ``sync_to_async`` would run every fill of the process
        on one thread, a crowd's first requests after a restart queued behind
        each other, each in a throwaway copy of the request's context.) When
        a sync caller waits above (``async_to_sync``: a test holding the
        transaction the fill must see), the fill runs on its thread, as
        asgiref would run it."""
        if getattr(AsyncToSync.executors, "current", None) is not None:
            return await sync_to_async(fill_token)(token)
        return await asyncio.get_running_loop().run_in_executor(None, fill_token, token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = None
        if scope["type"] == "http" and settings.ASGI_FAST_READS:
            found = self.core.route(scope["method"], scope["path"])
        if found is None:
            await self.app(scope, receive, send)
            return
        route, kwargs = found
        if route.write:
            # The write routes take no input: a body (clients often send "{}")
            # is read and ignored, as Django's view ignores it, and handed on
            # unread-looking when Django answers.
            receive, small = await _buffered(receive)
            if not small:
                await self.app(scope, receive, send)
                return
        headers = dict(scope.get("headers", ()))
        token = token_of(headers.get(b"authorization"))
        learn_as = learn_key(route, scope["method"], scope.get("scheme"), headers)
        learned = self.core.learned(learn_as)
        answer = None
        started = time.perf_counter()
        if learned is not None:
            raw_query = scope.get("query_string", b"")
            answer = await self.core.answer(route, token, headers, raw_query, kwargs)
            if answer is TOKEN_NOT_FRESH:
                # Filled on a thread (the database driver is sync), then asked again.
                entry = await self._fill(token)
                answer = (
                    await self.core.answer(route, token, headers, raw_query, kwargs, entry)
                    if entry is not None
                    else None
                )
        count_outcome(route, scope["method"], answer is not None)
        if answer is None or learned is None:
            await self.app(scope, receive, self._learning(send, learn_as) if token is not None else send)
            return
        await send({"type": "http.response.start", "status": answer.status, "headers": answer_headers(answer, learned)})
        await send({"type": "http.response.body", "body": answer.body, "more_body": False})
        metrics.observe_request(route=route.pattern, method=scope["method"], status=answer.status, started=started)

    def _learning(self, send: Send, learn_as: tuple[Any, ...]) -> Send:
        """``send`` that keeps the headers of Django's successful answer."""

        async def learning_send(message: Mapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                sent = [(bytes(n).lower(), bytes(v)) for n, v in message.get("headers", ())]
                self.core.learn(learn_as, int(message["status"]), sent)
            await send(message)

        return learning_send


# The most of a write's body the route reads before leaving it to Django.
MAX_IGNORED_BODY = 64 * 1024


async def _buffered(receive: Receive) -> tuple[Receive, bool]:
    """Read the request's body (up to ``MAX_IGNORED_BODY``); a ``receive``
    that gives it again, then the original's messages (a disconnect, or the
    rest of a larger body), and whether the whole body was read."""
    chunks: list[bytes] = []
    size, more = 0, True
    while more and size <= MAX_IGNORED_BODY:
        message = await receive()
        if message["type"] != "http.request":
            chunks, more = [], False
            pending: list[Mapping[str, Any]] = [message]
            break
        chunks.append(bytes(message.get("body", b"")))
        size += len(chunks[-1])
        more = bool(message.get("more_body", False))
    else:
        pending = [{"type": "http.request", "body": b"".join(chunks), "more_body": more}]

    async def replay() -> Mapping[str, Any]:
        return pending.pop(0) if pending else await receive()

    return replay, not more and size <= MAX_IGNORED_BODY and pending[0]["type"] == "http.request"


class _Refused(Exception):
    """A throttle refused the request (raised from its handler's first round trip)."""


class _Counting:
    """What rides ahead of a request's first round trip (``core.redis.Ahead``):
    its throttle counts, for a token whose entry is held that entry read
    again, which must be the bytes held, and the user's mark for the day
    when one is due (``activity.pending_mark``), which must be taken: an
    error (its script not loaded yet) leaves the request to Django, whose
    sync call loads it."""

    def __init__(
        self,
        view: Any,
        user_id: int,
        *,
        held: tuple[str, bytes] | None = None,
        mark: tuple[Any, ...] | None = None,
    ) -> None:
        now_ms = int(time.time() * 1000)
        self.windows: list[tuple[str, str]] = []  # (window's name, this request's member)
        self.commands: list[tuple[Any, ...]] = []
        for name, window_ms, limit in _windows(view, user_id):
            args = throttle_args(now_ms, window_ms, limit)
            self.windows.append((name, args[-1]))
            self.commands.append(THROTTLE_SCRIPT.command([keys.throttle(name)], args))
        self.held = None if held is None else held[1]  # the entry's bytes, as held
        if held is not None:
            self.commands.append(("GET", keys.auth_token(held[0])))
        self.mark_at = len(self.commands) if mark is not None else None  # the mark's reply
        if mark is not None:
            self.commands.append(mark)

    def token_changed(self, replies: list[Any] | None) -> bool:
        """Whether the held entry is no longer Redis's (False when none is held);
        replies lost with the connection say nothing."""
        if self.held is None or replies is None:
            return False
        reply = replies[len(self.windows)]
        return isinstance(reply, Exception) or reply is None or bytes(reply) != self.held

    def marked(self, replies: list[Any] | None) -> bool:
        """Whether the user's mark for the day was taken (False when none was sent)."""
        return self.mark_at is not None and replies is not None and not isinstance(replies[self.mark_at], Exception)

    def allowed(self, replies: list[Any] | None) -> bool:
        if replies is None or self.token_changed(replies):
            return False
        if self.mark_at is not None and not self.marked(replies):
            return False
        return all(_allows(reply) for reply in replies[: len(self.windows)])

    def check(self, replies: list[Any]) -> None:
        if not self.allowed(replies):
            raise _Refused

    def counted(self, replies: list[Any] | None) -> list[tuple[str, str]]:
        """The windows that counted the request (all of them when the replies
        were lost with the connection: taking back a member never counted
        changes nothing)."""
        if replies is None:
            return self.windows
        return [window for window, reply in zip(self.windows, replies, strict=False) if _allows(reply)]


def _allows(reply: Any) -> bool:
    return not isinstance(reply, Exception) and bool(int(reply[0]))


def _windows(view: Any, user_id: int) -> list[tuple[str, int, int]]:
    """(name, window in ms, limit) of each of the view's throttles that counts a signed-in user."""
    windows = []
    for throttle_class in view.throttle_classes:
        throttle = throttle_class()
        if throttle.rate is None or throttle_class is AnonRateThrottle:
            continue  # no rate; the anonymous one never counts a signed-in user
        name = throttle.cache_format % {"scope": throttle.scope, "ident": user_id}
        windows.append((name, int(throttle.duration * 1000), int(throttle.num_requests)))
    return windows


async def _uncount(counted: list[tuple[str, str]]) -> None:
    for name, member in counted:
        await readmodel.throttle_unhit_async(name=name, member=member)
