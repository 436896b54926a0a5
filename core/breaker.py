"""A circuit breaker for Redis connections.

With short socket timeouts a dead Redis still costs up to one timeout per
call, and an inbox request makes several calls. After a connection or
timeout error the breaker opens for ``REDIS_BREAKER_COOLDOWN`` seconds:
every call to that server fails at once with ConnectionError (callers
already fall back to PostgreSQL on RedisError). After the cooldown one call
is let through; its success closes the breaker.

It is a redis-py Connection subclass, so it protects every client built on
the pool (django-redis's cache, the read model) without wrapping commands.

The breakers read the time from ``clock``: ``time.monotonic``, so a change
of the wall clock neither opens nor closes them. It is looked up on every
call, so a test lets a cooldown pass by setting it to a clock of its own and
moving that forward, instead of sleeping (time-machine moves the wall clock
only, not the monotonic one).
"""

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from queue import Empty
from typing import Any

from django_redis.pool import ConnectionFactory
from redis.connection import BlockingConnectionPool, Connection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

_FAILURES = (RedisConnectionError, RedisTimeoutError, OSError)

clock: Callable[[], float] = time.monotonic


class CircuitBreaker:
    def __init__(self, cooldown: float) -> None:
        self.cooldown = cooldown
        self.open_until = 0.0
        self._lock = threading.Lock()

    def check(self) -> None:
        now = clock()
        with self._lock:
            if now < self.open_until:
                raise RedisConnectionError("Redis circuit breaker is open (recent failure); failing fast.")
            if self.open_until:
                # Half-open: let this call probe, keep the others failing fast meanwhile.
                self.open_until = now + self.cooldown

    def record_failure(self) -> None:
        traffic.failures += 1
        with self._lock:
            self.open_until = clock() + self.cooldown

    def record_success(self) -> None:
        if self.open_until:
            with self._lock:
                self.open_until = 0.0

    @property
    def is_open(self) -> bool:
        return clock() < self.open_until


_breakers: dict[tuple[str, int], CircuitBreaker] = {}
_registry_lock = threading.Lock()


def breaker_for(host: str, port: int, cooldown: float) -> CircuitBreaker:
    with _registry_lock:
        breaker = _breakers.get((host, port))
        if breaker is None:
            breaker = _breakers[(host, port)] = CircuitBreaker(cooldown)
        return breaker


def reset_breakers() -> None:
    """Close every breaker (tests, and after an operator fixed Redis)."""
    with _registry_lock:
        for breaker in _breakers.values():
            breaker.open_until = 0.0


@dataclass
class Traffic:
    """Running totals of what this process's breaker connections did."""

    # Connection failures: the read model's healer looks at Redis's generation marker
    # afresh after any (a Redis that failed may come back empty).
    failures: int = 0


traffic = Traffic()


class BreakerConnection(Connection):
    def __init__(self, *args: Any, breaker_cooldown: float = 5.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.breaker = breaker_for(self.host, int(self.port), breaker_cooldown)

    def connect(self) -> None:
        if self.is_connected:
            return
        self.breaker.check()
        try:
            super().connect()
        except _FAILURES:
            self.breaker.record_failure()
            raise

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if not self.is_connected:
            self.breaker.check()
        try:
            super().send_packed_command(command, check_health)
        except _FAILURES:
            self.breaker.record_failure()
            raise

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            response = super().read_response(*args, **kwargs)
        except _FAILURES:
            self.breaker.record_failure()
            raise
        self.breaker.record_success()
        return response


def any_open() -> bool:
    """True while some Redis server of this process recently failed (its breaker is open)."""
    with _registry_lock:
        return any(breaker.is_open for breaker in _breakers.values())


class RedisPoolExhausted(RedisConnectionError):
    """Every connection of this process's pool stayed busy for the pool's
    timeout: Redis is reachable but this process is overloaded. A
    ConnectionError, so the read model falls back as for any Redis failure;
    where nothing catches it the request answers 503 (core.api.errors)."""


class BoundedConnectionPool(BlockingConnectionPool):
    """redis-py's pool with a ceiling: at most ``max_connections`` sockets per
    process, a caller waiting up to ``timeout`` seconds for a free one.

    redis-py's plain pool opens a new connection whenever every pooled one is
    busy, with no ceiling. Under an ASGI server each concurrent request runs
    its sync code in a thread of its own, so a burst of thousands of clients
    opens as many connections per process, until Redis refuses clients
    (``maxclients``) or the machine its file descriptors."""

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().get_connection(*args, **kwargs)
        except RedisConnectionError as exc:
            # redis-py raises its generic ConnectionError for an empty pool;
            # the pool's own queue tells the two apart without parsing text.
            if self._no_connection_free(exc):
                raise RedisPoolExhausted(f"no Redis connection free within {self.timeout} s") from exc
            raise

    def _no_connection_free(self, exc: BaseException) -> bool:
        return isinstance(exc.__context__, Empty)


class SharedPoolFactory(ConnectionFactory):
    """django-redis's connection factory, its pool made once per process.

    django-redis keeps one pool per URL in a process-wide dict, but fills it
    without a lock; under an ASGI server a burst's first requests, each in a
    thread of its own with a cache client of its own, all find the dict empty
    and each builds a pool, and the clients that lost the race keep theirs:
    a process then holds several bounded pools, and more connections than
    the bound. So this factory keeps its own pools (by URL, process-wide),
    filled under a lock, and asks django-redis only to build one."""

    pools: dict[str, Any] = {}
    lock = threading.Lock()

    def get_or_create_connection_pool(self, params: dict[str, Any]) -> Any:
        key = params["url"]
        pool = self.pools.get(key)
        if pool is None:
            with self.lock:
                pool = self.pools.get(key)
                if pool is None:
                    pool = self.pools[key] = self.get_connection_pool(params)
        return pool
