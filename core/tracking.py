"""Answers held in this process for as long as Redis says the keys they were
read from are unchanged: server-assisted client-side caching (RESP3
``CLIENT TRACKING``) at the level of a whole answer.

A ``HeldAnswers`` owns one connection of its own with tracking on. Reads that
should be held go through it (``read``): Redis remembers every key they
touched, the keys that scripts read included, and pushes an ``invalidate``
message on that same connection when any of them changes (or ``invalidate``
with no keys on FLUSHDB/FLUSHALL). ``hold`` keeps the caller's answer with the
keys it came from and a time it is valid until; ``get`` first reads whatever
pushes arrived (a non-blocking poll, no round trip), drops the answers they
touch, and returns what is left. A held answer costs no round trip at all.

redis-py's own client-side cache keeps single command replies, each still a
trip through its command machinery; an answer here is what several commands
and a script worked out, served by one dict lookup.

Why it stays correct:

- Order: pushes and replies share the connection, so a push that arrives
  before a read's reply was caused by a write the read already saw. Pushes
  that arrive after the first reply of a round trip may concern what the
  round trip read, so ``hold`` refuses an answer whose keys they touched
  (``Ticket``), also when another thread read them meanwhile.
- This process's own writes: Redis queues the writer's reply and the
  invalidation to us in the same event-loop pass, but writes the two sockets
  one after the other, so the writer may read its reply before the push
  reaches us. After anything this process did on a pooled connection or
  the event loop's client (``core.breaker.traffic.commands_done`` counts
  every command once its reply is read; telling writes from reads is not
  worth the risk), the next ``get`` sends a PING on the tracking
  connection and reads to its PONG first: Redis queued any invalidation of
  that write before the PONG. Repeated reads with nothing sent in between
  cost no round trip.
- A lost connection (a restart, a closed socket) drops every held answer;
  Redis forgets the tracking with the connection, and a reconnect starts
  empty. A silent one (a partition, a frozen server): a PING goes out once
  ``HEARTBEAT_SECONDS`` pass without a word from Redis, and without its PONG
  within the socket timeout the held answers are dropped. A write that
  Redis accepted but could not tell us about is therefore served for at most
  about ``HEARTBEAT_SECONDS`` plus that timeout.
- Held answers also carry the time they stop being true by themselves (an
  expiry, a publish time): never served from that moment on.

Only on a single real Redis: a Redis Cluster would need a tracking
connection per node, and fakeredis (the embedded default) has no tracking.
"""

import os
import threading
import time
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import hiredis
from redis.connection import Connection
from redis.exceptions import RedisError, ResponseError

from core import breaker
from core.redis import get_redis, is_cluster

HEARTBEAT_SECONDS = 1.0
# Invalidations remembered for ``hold``'s check (a ticket older than the last
# time they were forgotten is refused: that answer is simply not held).
RECENT_KEYS = 10_000

# Round trips this process waited for on tracking connections (reads and
# the PINGs after its own sends; a heartbeat's PING is not waited for):
# bench.harness.RoundTrips adds them to a client's.
round_trips = [0]


# What reading a push returns on the tracking connection (see HeldAnswers._invalidated).
_PUSHED = object()


@dataclass(frozen=True)
class Ticket:
    """Where the tracking connection stood when a ``read`` got its first reply."""

    generation: int
    sequence: int


@dataclass
class _Held:
    value: Any
    until_ms: float
    keys: tuple[bytes, ...]


class HeldAnswers:
    """Answers by name (``get``/``hold``), each dropped as soon as a key it was
    read from changes. Thread-safe; a forked child starts empty. At most
    ``max_answers`` (all are forgotten when one more comes): an unread count
    with its dozen keys takes about 2.7 KB, so the default bounds a process
    at about 27 MB."""

    def __init__(self, *, max_answers: int = 10_000) -> None:
        self.max_answers = max_answers
        self._lock = threading.RLock()
        self._pid = os.getpid()
        self._connection: Connection | None = None
        self._pool: Any = None  # the read model's pool the connection copies (settings may swap it)
        self._generation = 0  # moves whenever the connection (and what Redis tracks for it) is gone
        self._answers: dict[Hashable, _Held] = {}
        self._by_key: dict[bytes, set[Hashable]] = {}
        # Invalidations seen since ``_horizon``: key -> sequence of its latest.
        self._sequence = 0
        self._recent: dict[bytes, int] = {}
        self._horizon = 0
        self._flushed_at = 0
        self._writes_seen = breaker.traffic.commands_done
        self._heard = 0.0  # monotonic time Redis last said anything on the connection
        self._ping_sent = 0.0  # monotonic time of the PING awaiting its PONG, or 0

    # --- what callers use -----------------------------------------------------

    @staticmethod
    def available() -> bool:
        """A single real Redis (not a cluster, not the embedded fakeredis)."""
        if is_cluster():
            return False
        # The breaker connection counts what this process sends (see the module's docstring).
        return issubclass(get_redis().connection_pool.connection_class, breaker.BreakerConnection)

    def get(self, name: Hashable, now_ms: int) -> Any | None:
        """The answer held under ``name``, if nothing it was read from changed
        and its time has not come; None otherwise (or when Redis is unsure)."""
        with self._lock:
            if self._connection is None or not self._answers or self._pid != os.getpid():
                return None
            if get_redis().connection_pool is not self._pool:  # another Redis now (tests swap CACHES)
                self._reset()
                return None
            try:
                self._settle()
            except (RedisError, OSError):
                self._reset()
                return None
            held = self._answers.get(name)
            if held is None:
                return None
            if now_ms >= held.until_ms:
                self._drop(name)
                return None
            return held.value

    def read(self, commands: Sequence[Sequence[Any]]) -> tuple[list[Any], Ticket]:
        """Send ``commands`` in one round trip on the tracking connection; the
        replies (an error reply raised once all are read) and the ``Ticket``
        to ``hold`` an answer worked out from them."""
        with self._lock:
            try:
                connection = self._connected()
                self._await_pong(connection)
                self._writes_seen = breaker.traffic.commands_done  # this round trip is a barrier too
                round_trips[0] += 1
                connection.send_packed_command([hiredis.pack_command(tuple(c)) for c in commands])
                replies: list[Any] = []
                ticket = None
                for _ in commands:
                    try:
                        replies.append(self._reply(connection))
                    except ResponseError as exc:
                        replies.append(exc)
                    if ticket is None:
                        ticket = Ticket(self._generation, self._sequence)
                self._heard = time.monotonic()
            except BaseException:
                self._reset()
                raise
        for reply in replies:
            if isinstance(reply, ResponseError):
                raise reply
        if ticket is None:
            raise ValueError("read() needs at least one command")
        return replies, ticket

    def hold(self, name: Hashable, value: Any, *, keys: Iterable[str | bytes], until_ms: float, ticket: Ticket) -> bool:
        """Keep ``value`` under ``name``: it was worked out from the replies of
        the ``read`` that gave ``ticket``, and depends on ``keys`` (every key
        those commands read) and on the time staying before ``until_ms``.
        False (nothing held) when one of the keys changed since that read."""
        names = tuple(k.encode() if isinstance(k, str) else bytes(k) for k in keys)
        with self._lock:
            if (
                ticket.generation != self._generation
                or ticket.sequence < self._horizon
                or self._flushed_at > ticket.sequence
                or any(self._recent.get(k, -1) > ticket.sequence for k in names)
            ):
                return False
            if len(self._answers) >= self.max_answers:
                self._forget_answers()
            self._drop(name)
            self._answers[name] = _Held(value, until_ms, names)
            for key in names:
                self._by_key.setdefault(key, set()).add(name)
            return True

    def news(self, timeout: float) -> bool:
        """Whether Redis sent something not yet taken in, waiting up to
        ``timeout`` seconds for it (tests use it to let a push arrive)."""
        with self._lock:
            connection = self._connection
            return connection is not None and bool(connection.can_read(timeout=timeout))

    def drop(self, name: Hashable) -> None:
        with self._lock:
            self._drop(name)

    def clear(self) -> None:
        """Forget every held answer and the connection (tests; after a fork)."""
        with self._lock:
            self._reset()

    # --- the connection ---------------------------------------------------------

    def _connected(self) -> Connection:
        if self._pid != os.getpid():  # a forked child: the parent's socket is not ours
            self._connection = None
            self._pid = os.getpid()
            self._reset()
        pool = get_redis().connection_pool
        if self._connection is not None and pool is not self._pool:
            self._reset()
        if self._connection is None:
            connection = pool.connection_class(**{**pool.connection_kwargs, "protocol": 3, "health_check_interval": 0})
            connection.counts_commands = False
            try:
                connection.connect()
                connection._parser.set_invalidation_push_handler(self._invalidated)
                connection.send_command("CLIENT", "TRACKING", "ON")
                connection.read_response()
            except BaseException:
                connection.disconnect()
                raise
            self._connection, self._pool = connection, pool
            self._heard = time.monotonic()
            self._ping_sent = 0.0
            self._writes_seen = breaker.traffic.commands_done
        return self._connection

    def _settle(self) -> None:
        """Take in what Redis pushed (no waiting), after a PING and its PONG
        when this process wrote since, and keep the heartbeat."""
        connection = self._connection
        if connection is None:
            raise RedisError("no tracking connection")
        now = time.monotonic()
        if self._writes_seen != breaker.traffic.commands_done:
            self._writes_seen = breaker.traffic.commands_done
            if not self._ping_sent:
                connection.send_command("PING")
                self._ping_sent = now
            round_trips[0] += 1
            self._await_pong(connection)
        while connection.can_read(timeout=0):
            self._take(connection.read_response(push_request=True), now)
        if self._ping_sent:
            if now - self._ping_sent > float(connection.socket_timeout or 1.0):
                raise TimeoutError("no PONG on the tracking connection")
        elif now - self._heard > HEARTBEAT_SECONDS:
            connection.send_command("PING")
            self._ping_sent = now

    def _reply(self, connection: Connection) -> Any:
        """The next reply, taking in the pushes queued before it one at a time:
        left to itself the parser handles a push and reads on one call deeper,
        so a few thousand invalidations queued behind a burst of writes
        overflowed the stack."""
        while True:
            reply = connection.read_response(push_request=True)
            if reply is not _PUSHED:
                return reply

    def _await_pong(self, connection: Connection) -> None:
        while self._ping_sent:
            self._take(connection.read_response(push_request=True), time.monotonic())

    def _take(self, reply: Any, now: float) -> None:
        """A reply read outside a ``read``: a push (already handled by
        ``_invalidated``, which returns ``_PUSHED``) or the PONG of our PING."""
        self._heard = now
        if reply is not _PUSHED:
            self._ping_sent = 0.0

    def _invalidated(self, message: list[Any]) -> object:
        """Redis's push: ``[b"invalidate", [keys]]``, or ``None`` for every key.
        Returns ``_PUSHED``: what a read sees in place of a reply (a reply may be None)."""
        self._sequence += 1
        names = message[1]
        if names is None:
            self._flushed_at = self._sequence
            self._forget_answers()
            return _PUSHED
        if len(self._recent) > RECENT_KEYS:
            self._recent.clear()
            self._horizon = self._sequence
        for key in names:
            key = bytes(key)
            self._recent[key] = self._sequence
            for name in self._by_key.pop(key, ()):
                self._drop(name)
        return _PUSHED

    def _drop(self, name: Hashable) -> None:
        held = self._answers.pop(name, None)
        if held is None:
            return
        for key in held.keys:
            names = self._by_key.get(key)
            if names is not None:
                names.discard(name)
                if not names:
                    del self._by_key[key]

    def _forget_answers(self) -> None:
        self._answers.clear()
        self._by_key.clear()

    def _reset(self) -> None:
        """The connection is gone or unsure: so is everything held through it."""
        connection, self._connection = self._connection, None
        if connection is not None and self._pid == os.getpid():
            connection.disconnect()
        self._generation += 1
        self._forget_answers()
        self._recent.clear()
        self._horizon = self._sequence
        self._ping_sent = 0.0
