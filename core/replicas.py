"""PostgreSQL read replicas: which database a query goes to.

``DATABASE_REPLICA_URLS`` names zero or more streaming replicas of the
primary (``default``). With none, every query goes to the primary, as before.
With some, ``ReplicaRouter`` sends a read to a replica only when all of these
hold (docs/ARCHITECTURE.md, "Read replicas"):

- it runs inside a read request (``ReplicaReadsMiddleware``: GET, HEAD or
  OPTIONS), where selectors and pages read; Celery tasks, commands and
  every write request read the primary (a task that delivers a message it was
  just handed must find the row);
- this request has written nothing yet, and the primary's connection is not in
  a transaction (a service reads what it is about to change from the primary);
- the request's user is known (never while authentication itself reads: a
  token or session created a moment ago may not have reached the replica) and
  did not write within ``DATABASE_REPLICA_PIN_SECONDS`` (read-your-writes: a
  marker in the cache, set when a request of that user wrote);
- the replica answers (a connection error marks it down for
  ``DATABASE_REPLICA_DOWN_SECONDS``) and its replay lag, checked at most every
  ``DATABASE_REPLICA_LAG_CHECK_SECONDS`` per process, is within
  ``DATABASE_REPLICA_MAX_LAG_SECONDS``.

Otherwise the read goes to the primary. Writes and migrations always do.

A process that serves requests (config/wsgi.py, config/asgi.py,
``manage.py serve``) first connects once to every replica
(``check_replicas_reachable``): one that does not answer stops it at start,
like a malformed URL. Commands (``migrate`` among them) and workers skip the
check; they read the primary only.
"""

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import environ
import psycopg
from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, InterfaceError, OperationalError, connections
from django.db import Error as DatabaseError
from django.http import HttpRequest
from django.http.response import HttpResponseBase

from core import keys

logger = logging.getLogger(__name__)

REPLICA_ALIAS_PREFIX = "replica"
_POSTGRES_SCHEMES = {"postgres", "postgresql", "pgsql", "postgis"}
_SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}

# Seconds behind the primary, from the replica itself: 0 while it has replayed
# everything it received (an idle primary sends nothing, and the age of the
# last replayed transaction would grow without any lag), else the age of the
# last transaction it replayed.
LAG_SQL = (
    "SELECT CASE WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0"
    " ELSE COALESCE(EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp()), 0) END"
)


# PostgreSQL unreachable or the connection gone, as Django wraps it and as psycopg raises it.
_OUTAGE_ERRORS = (OperationalError, InterfaceError, psycopg.OperationalError, psycopg.InterfaceError)


def caused_by(exc: BaseException | None, kinds: tuple[type[BaseException], ...]) -> bool:
    """Whether ``exc`` or an error it was raised from (or while handling) is one of ``kinds``."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, kinds):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def is_database_outage(exc: BaseException | None) -> bool:
    """True for errors meaning PostgreSQL cannot be reached or the connection
    died (as opposed to a query bug): Django's wrapped ones and psycopg's own,
    which escape Django's wrapper when they come from the pool or a connect."""
    return caused_by(exc, _OUTAGE_ERRORS)


def replica_databases(urls: list[str], *, primary: dict[str, Any], timeout: float) -> dict[str, dict[str, Any]]:
    """``DATABASES`` entries (``replica0``, ``replica1``, ...) for the replica
    URLs, each with the primary's options (its pool settings among them), and
    ``timeout`` seconds as the longest wait for a connection to one.

    A URL that is not a PostgreSQL URL with a host and a database name, or a
    replica of a primary that is not PostgreSQL, stops the process at start
    with the reason: a typo must not quietly send every read to the primary."""
    databases: dict[str, dict[str, Any]] = {}
    for index, url in enumerate(u.strip() for u in urls):
        if not url:
            continue
        shown = _without_password(url)
        parts = urlsplit(url)
        if parts.scheme not in _POSTGRES_SCHEMES:
            raise ImproperlyConfigured(
                f"DATABASE_REPLICA_URLS: {shown!r} is not a PostgreSQL URL "
                "(expected postgres://user:password@host:port/name)."
            )
        try:
            port = parts.port
        except ValueError as error:
            raise ImproperlyConfigured(f"DATABASE_REPLICA_URLS: {shown!r} has a bad port ({error}).") from None
        if not parts.hostname or not parts.path.strip("/"):
            raise ImproperlyConfigured(
                f"DATABASE_REPLICA_URLS: {shown!r} needs a host and a database name "
                "(postgres://user:password@host:port/name)."
            )
        if "postgresql" not in str(primary.get("ENGINE", "")):
            raise ImproperlyConfigured(
                "DATABASE_REPLICA_URLS is set but DATABASE_URL is not PostgreSQL: replicas need a PostgreSQL primary."
            )
        config = environ.Env.db_url_config(url)
        config["PORT"] = port or config.get("PORT") or ""
        for name in ("ENGINE", "CONN_MAX_AGE", "CONN_HEALTH_CHECKS"):
            if name in primary:
                config[name] = primary[name]
        config["OPTIONS"] = _replica_options(primary.get("OPTIONS") or {}, timeout=timeout)
        # Test runs read their test database through the replica's alias.
        config["TEST"] = {"MIRROR": DEFAULT_DB_ALIAS}
        databases[f"{REPLICA_ALIAS_PREFIX}{index}"] = config
    return databases


def _replica_options(primary_options: dict[str, Any], *, timeout: float) -> dict[str, Any]:
    options = {k: v for k, v in primary_options.items() if k != "pool"}
    # libpq rounds connect_timeout up and refuses less than 2 s.
    options["connect_timeout"] = max(2, int(timeout + 0.999))
    if "pool" in primary_options:
        pool = dict(primary_options["pool"])
        # A dead replica must cost a short wait, once (it is then marked down),
        # not the primary's pool timeout. (CONN_HEALTH_CHECKS, copied from the
        # primary, makes the pool check a connection before handing it over.)
        pool["timeout"] = timeout
        options["pool"] = pool
    return options


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@", 1)
    return url


def _where(config: dict[str, Any]) -> str:
    return f"{config.get('HOST')}:{config.get('PORT') or 5432}/{config.get('NAME')}"


_start_checked = False
_start_check_lock = threading.Lock()


def check_replicas_reachable() -> None:
    """Connect once to every replica in ``DATABASES`` and close again; raise
    ImproperlyConfigured naming each one that does not answer (alias,
    host:port/name, the server's or libpq's reason, never the password).

    For the start of a serving process: a replica that is down then would only
    be marked down at the first read and quietly send every read to the
    primary, hiding a typo in a host name or a port. Runs once per process
    (``manage.py serve`` checks, then runserver imports config/wsgi.py); a
    replica lost later is the router's business (``mark_down``). Each attempt
    waits at most the replica's ``connect_timeout`` (2 s by default)."""
    global _start_checked
    with _start_check_lock:
        if _start_checked:
            return
        failures: list[str] = []
        for alias in replica_aliases():
            connection = connections[alias]
            params = connection.get_connection_params()
            params.setdefault("connect_timeout", 2)
            try:
                # Straight through the driver: the replica's pool would keep
                # retrying for its timeout and then stay open in this process.
                psycopg.connect(**params).close()
            except psycopg.Error as error:
                reason = " ".join(str(error).split())
                password = connection.settings_dict.get("PASSWORD")
                if password:
                    reason = reason.replace(str(password), "***")
                failures.append(f"{alias} at {_where(connection.settings_dict)} cannot be reached ({reason})")
        if failures:
            raise ImproperlyConfigured(
                "DATABASE_REPLICA_URLS: "
                + "; ".join(failures)
                + ". Start the replica or fix its URL, or remove it from DATABASE_REPLICA_URLS."
            )
        _start_checked = True


# --- health, per process ---------------------------------------------------------


@dataclass
class _Health:
    down_until: float = 0.0
    lag_checked_at: float = float("-inf")
    lag: float = 0.0


_health: dict[str, _Health] = {}
_health_lock = threading.Lock()


def reset_health() -> None:
    """Forget what this process learnt about the replicas (tests)."""
    with _health_lock:
        _health.clear()


def _state_of(alias: str) -> _Health:
    with _health_lock:
        return _health.setdefault(alias, _Health())


def mark_down(alias: str, error: BaseException | None = None) -> None:
    """Send no read to ``alias`` for ``DATABASE_REPLICA_DOWN_SECONDS``."""
    _state_of(alias).down_until = time.monotonic() + float(settings.DATABASE_REPLICA_DOWN_SECONDS)
    logger.warning("read replica %s unavailable, reads go to the primary: %s", alias, error)


def replica_aliases() -> list[str]:
    return list(getattr(settings, "DATABASE_REPLICA_ALIASES", ()))


def _usable(alias: str) -> bool:
    """Is ``alias`` up and close enough behind the primary? Connects (or takes
    a pooled connection) and, when due, measures the lag."""
    state = _state_of(alias)
    now = time.monotonic()
    if now < state.down_until:
        return False
    connection = connections[alias]
    try:
        connection.ensure_connection()
        if now - state.lag_checked_at >= float(settings.DATABASE_REPLICA_LAG_CHECK_SECONDS):
            with connection.cursor() as cursor:
                cursor.execute(LAG_SQL)
                row = cursor.fetchone()
            state.lag = float(row[0] or 0) if row else 0.0
            state.lag_checked_at = now
    except DatabaseError as error:
        mark_down(alias, error)
        connection.close()
        return False
    if state.lag > float(settings.DATABASE_REPLICA_MAX_LAG_SECONDS):
        logger.info("read replica %s lags %.1f s, reads go to the primary", alias, state.lag)
        return False
    return True


# --- the request scope -------------------------------------------------------------


@dataclass
class ReadScope:
    """What the router needs to know about the read request it serves."""

    user_id: Callable[[], int | None]
    reads: bool = True  # False in a write request: only its writes are recorded
    wrote: bool = False
    pinned: bool | None = None  # the user's read-your-writes marker, looked up once
    used: set[str] = field(default_factory=set)


_scope: ContextVar[ReadScope | None] = ContextVar("replica_read_scope", default=None)


@contextmanager
def replica_reads(user_id: Callable[[], int | None], *, reads: bool = True) -> Iterator[ReadScope]:
    """Reads inside may go to a replica (see the module's rules); with
    ``reads=False`` they may not, and the scope only records writes."""
    scope = ReadScope(user_id=user_id, reads=reads)
    token = _scope.set(scope)
    try:
        yield scope
    finally:
        _scope.reset(token)


def pin_user(user_id: int) -> None:
    """The user wrote: their reads go to the primary for a while."""
    cache.set(keys.replica_pin(user_id), 1, timeout=float(settings.DATABASE_REPLICA_PIN_SECONDS))


def _user_pinned(scope: ReadScope, user_id: int) -> bool:
    if scope.pinned is None:
        # The cache ignores Redis errors (None): a Redis outage costs
        # read-your-writes within the pin window, not the request.
        scope.pinned = bool(cache.get(keys.replica_pin(user_id)))
    return scope.pinned


class ReplicaRouter:
    """Reads to a replica when the rules above allow it; writes and migrations
    to the primary. Without replicas it has no opinion (Django's default)."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        aliases = replica_aliases()
        if not aliases:
            return None
        instance = hints.get("instance")
        if instance is not None and instance._state.db in aliases:
            return str(instance._state.db)  # an object's relations come from where it came from
        scope = _scope.get()
        if scope is None or not scope.reads or scope.wrote or connections[DEFAULT_DB_ALIAS].in_atomic_block:
            return DEFAULT_DB_ALIAS
        user_id = scope.user_id()
        if user_id is None or _user_pinned(scope, user_id):
            return DEFAULT_DB_ALIAS
        candidates = [alias for alias in aliases if alias in scope.used] or aliases[:]
        random.shuffle(candidates)
        for alias in candidates:
            if _usable(alias):
                scope.used.add(alias)
                return alias
        return DEFAULT_DB_ALIAS

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        if not replica_aliases():
            return None
        scope = _scope.get()
        if scope is not None:
            scope.wrote = True
        return DEFAULT_DB_ALIAS

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        aliases = replica_aliases()
        if not aliases:
            return None
        ours = {DEFAULT_DB_ALIAS, *aliases}
        return obj1._state.db in ours and obj2._state.db in ours

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        return False if db.startswith(REPLICA_ALIAS_PREFIX) or db in replica_aliases() else None


# Set while the router resolves a request's user: the session and user reads
# that resolving makes come back through the router, which must not start it again.
_resolving_user: ContextVar[bool] = ContextVar("replica_resolving_user", default=False)


def _known_user_id(request: HttpRequest) -> int | None:
    """The request's user id, 0 for an anonymous request (it has no writes of
    its own to read back), None while that user is being resolved (the reads
    that resolve it take the default route)."""
    if "user" not in request.__dict__ or _resolving_user.get():
        return None
    token = _resolving_user.set(True)
    try:
        user: Any = request.user
        if not getattr(user, "is_authenticated", False):
            return 0
        return int(user.pk)
    finally:
        _resolving_user.reset(token)


class ReplicaReadsMiddleware:
    """Opens the read scope for read requests; after a request that wrote,
    marks its user for read-your-writes."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if not replica_aliases():
            return self.get_response(request)
        with replica_reads(lambda: _known_user_id(request), reads=request.method in _SAFE_METHODS) as scope:
            request.replica_scope = scope  # type: ignore[attr-defined]
            response = self.get_response(request)
        user_id = _known_user_id(request)
        if scope.wrote and user_id:
            pin_user(user_id)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> None:
        # A replica that failed in the middle of a query: the request gets the
        # outage answer (DatabaseUnavailableMiddleware), the next ones the primary.
        scope: ReadScope | None = getattr(request, "replica_scope", None)
        if scope is not None and is_database_outage(exception):
            for alias in scope.used:
                mark_down(alias, exception)
