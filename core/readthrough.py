"""Read-through caching of per-request PostgreSQL lookups in Redis.

Authentication and the user context (a token's owner, a session's user, a
user's platforms) are looked up on every request; each lookup is cached in
one Redis string, an *entry*, with this policy (docs/ARCHITECTURE.md, "Cache
entries"):

- **Misses are cached too.** A bad token or an unknown user id is stored as a
  miss for ``MESSAGECENTER_CACHE_NULL_SECONDS``: a client repeating a wrong
  token costs one GET, not one SQL query, per request. The write that would
  make the lookup succeed (a token created, a user created) invalidates it.
- **One fill per key.** However many requests miss the same key at once, one
  reads PostgreSQL. Inside a process the threads that miss together share
  one call (``_single_flight``); across processes the filler holds the
  entry's fill lock (SET NX PX, a lease of ``MESSAGECENTER_CACHE_FILL_LEASE_MS``)
  and the others poll the entry until it appears. A filler that dies
  releases nothing: its lease runs out and a waiter takes the lock over.
  A waiter that waited two leases reads PostgreSQL itself.
- **Spread and logical expiry.** An entry carries the time it stops being
  fresh, drawn with ``MESSAGECENTER_CACHE_JITTER`` around the nominal TTL so
  that entries filled together do not expire together. Redis keeps it
  ``MESSAGECENTER_CACHE_STALE_SECONDS`` longer: a request that finds it
  stale takes the fill lock and refreshes it while every other request is
  served the stale copy (a stale copy is only ever a value no write has
  invalidated since: invalidation replaces the entry at once).
- **Invalidation wins every race.** A write that changes a lookup's answer
  replaces the entry with a tombstone after commit (read as a miss). A fill
  stores its copy only if the entry is still what it saw before reading
  PostgreSQL (``core/lua/cache_fill.lua``), so a copy read before the change
  never lands after the change's tombstone. The tombstone outlives any fill
  (``MESSAGECENTER_CACHE_TOMBSTONE_SECONDS`` is checked to exceed the lease).
- **Redis down.** Every RedisError reads PostgreSQL (the breaker in
  core/breaker.py makes a dead Redis cost one timeout, then nothing).

Values are JSON-compatible; ``None`` is a miss.
"""

import json
import random
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from redis.exceptions import RedisError

from core import readmodel

Loader = Callable[[], Any]
# Loads the entries at these positions (of the keys asked): a value or None for each, in order.
ManyLoader = Callable[[list[int]], list[Any]]

# A user's platforms change rarely and every change invalidates them.
PLATFORMS_TTL_SECONDS = 60 * 60 * 24


@dataclass(frozen=True)
class Policy:
    """How long an entry of one kind of lookup lives (seconds)."""

    fresh: float  # nominal time a value is served as is (jittered per entry)
    stale: float  # served stale this long past that, while one request refreshes
    miss: float  # a miss is remembered this long (jittered)


def auth_policy() -> Policy:
    """Tokens' owners and sessions' users."""
    return Policy(
        fresh=float(settings.MESSAGECENTER_AUTH_CACHE_TTL),
        stale=float(settings.MESSAGECENTER_CACHE_STALE_SECONDS),
        miss=float(settings.MESSAGECENTER_CACHE_NULL_SECONDS),
    )


def platforms_policy() -> Policy:
    return Policy(
        fresh=float(PLATFORMS_TTL_SECONDS),
        stale=float(settings.MESSAGECENTER_CACHE_STALE_SECONDS),
        miss=float(settings.MESSAGECENTER_CACHE_NULL_SECONDS),
    )


# --- entries --------------------------------------------------------------------------
# {"f": fresh until (ms), "v": value}  a value
# {"f": fresh until (ms)}              a miss
# {"x": random}                        a tombstone (read as absent; unique, so a fill
#                                      that saw one tombstone does not match the next)


@dataclass(frozen=True)
class Entry:
    raw: bytes | None  # as read: what a fill compares against before it stores
    found: bool  # a value or a miss (False: absent, a tombstone or unreadable)
    value: Any = None
    fresh_until_ms: int = 0

    def fresh(self) -> bool:
        """A value or a miss, to be served as it is now."""
        return self.found and _now_ms() < self.fresh_until_ms


def parse(raw: bytes | None) -> Entry:
    if raw is None:
        return Entry(raw=None, found=False)
    try:
        data = json.loads(raw)
    except ValueError:  # an entry of an older format: a miss, replaced by the next fill
        return Entry(raw=raw, found=False)
    if not isinstance(data, dict) or "f" not in data:
        return Entry(raw=raw, found=False)
    return Entry(raw=raw, found=True, value=data.get("v"), fresh_until_ms=int(data["f"]))


def encode(value: Any, policy: Policy, now_ms: int) -> tuple[bytes, int]:
    """The entry for ``value`` and its lifetime in Redis (ms)."""
    jitter = float(settings.MESSAGECENTER_CACHE_JITTER)
    spread = random.uniform(1.0 - jitter, 1.0 + jitter)  # noqa: S311 (spreading expiries, not secrets)
    if value is None:
        life_ms = max(1, int(policy.miss * spread * 1000))
        return json.dumps({"f": now_ms + life_ms}).encode(), life_ms
    fresh_ms = max(1, int(policy.fresh * spread * 1000))
    body = json.dumps({"f": now_ms + fresh_ms, "v": value}, separators=(",", ":"))
    return body.encode(), fresh_ms + int(policy.stale * 1000)


def tombstone() -> bytes:
    return json.dumps({"x": secrets.token_hex(8)}).encode()


def _now_ms() -> int:
    return int(time.time() * 1000)


# --- reads ----------------------------------------------------------------------------


def read_through(key: str, load: Loader, *, policy: Policy) -> Any:
    """The cached answer of ``load`` (a PostgreSQL lookup) under ``key``;
    None for a miss. See the module docstring for the policy."""
    try:
        entry = parse(readmodel.cache_entry_get(key=key))
    except RedisError:
        return load()
    if entry.found:
        if _now_ms() < entry.fresh_until_ms:
            return entry.value
        return _refresh_or_stale(key, load, policy, entry)
    return json.loads(_single_flight(key, lambda: json.dumps(_fill_on_miss(key, load, policy, entry))))


def read_through_many(entry_keys: Sequence[str], load: ManyLoader, *, policy: Policy) -> list[Any]:
    """``read_through`` of several entries at once (a page of rows): one round
    trip when all are fresh. The others (absent, stale or tombstoned) are
    loaded together by one call of ``load`` (their positions in
    ``entry_keys``; it answers a value or None for each) and stored under
    the same rules as one entry's fill: each under its fill lock, and only
    if it is still what it was before PostgreSQL was read, so invalidation
    wins here too. An entry another request is filling is not waited for:
    this caller's own load answers it, unstored."""
    try:
        entries = [parse(raw) for raw in readmodel.cache_entries_get(entry_keys=entry_keys)]
    except RedisError:
        return load(list(range(len(entry_keys))))
    values: list[Any] = [entry.value for entry in entries]
    wanted = [i for i, entry in enumerate(entries) if not entry.fresh()]
    if not wanted:
        return values
    token = secrets.token_hex(8)
    try:
        locks = readmodel.cache_fill_locks_and_look(
            entry_keys=[entry_keys[i] for i in wanted], token=token, lease_ms=_lease_ms()
        )
    except RedisError:
        locks = [(False, None)] * len(wanted)
    to_load: list[int] = []
    held: dict[int, bytes | None] = {}  # position -> the entry seen under its lock
    for i, (taken, raw) in zip(wanted, locks, strict=True):
        current = parse(raw)
        if current.fresh():
            values[i] = current.value  # filled since our first look
            if taken:
                _unlock_quietly(entry_keys[i], token)
            continue
        to_load.append(i)
        if taken:
            held[i] = raw
    loaded = load(to_load)
    for i, value in zip(to_load, loaded, strict=True):
        values[i] = value
        if i in held:
            _store(entry_keys[i], value, policy, token=token, seen=held[i])
    return values


def _unlock_quietly(key: str, token: str) -> None:
    try:
        readmodel.cache_fill_unlock(key=key, token=token)
    except RedisError:
        pass  # the lease ends it


def invalidate(*entry_keys: str) -> None:
    """Replace the entries by tombstones (after the commit that changed their
    source). Raises RedisError: callers log it and leave the entry to expire."""
    ttl_ms = int(float(settings.MESSAGECENTER_CACHE_TOMBSTONE_SECONDS) * 1000)
    readmodel.cache_invalidate(entry_keys=entry_keys, tombstone=tombstone(), ttl_ms=ttl_ms)


def _lease_ms() -> int:
    return int(settings.MESSAGECENTER_CACHE_FILL_LEASE_MS)


def _refresh_or_stale(key: str, load: Loader, policy: Policy, entry: Entry) -> Any:
    """A stale entry: the request that takes the fill lock refreshes it, every
    other one is served the stale value meanwhile."""
    token = secrets.token_hex(8)
    try:
        # The entry is read again with the lock, as on a miss: the request that
        # refreshed it may have stored and released between our read and our
        # lock, and this one would refresh it a second time.
        taken, raw = readmodel.cache_fill_lock_and_look(key=key, token=token, lease_ms=_lease_ms())
    except RedisError:
        return entry.value
    if not taken:
        return entry.value
    current = parse(raw)
    if current.fresh():
        _unlock_quietly(key, token)
        return current.value
    return _load_and_store(key, load, policy, token=token, seen=raw)


def _fill_on_miss(key: str, load: Loader, policy: Policy, entry: Entry) -> Any:
    token = secrets.token_hex(8)
    lease_ms = _lease_ms()
    deadline = time.monotonic() + 2 * lease_ms / 1000
    pause = 0.002
    while True:
        try:
            # The entry is read again with the lock: another fill may have stored
            # and released since our miss (however short that gap, a loaded
            # machine can stretch it past a whole fill).
            taken, raw = readmodel.cache_fill_lock_and_look(key=key, token=token, lease_ms=lease_ms)
            current = parse(raw)
            if taken:
                if current.found:
                    readmodel.cache_fill_unlock(key=key, token=token)
                    return current.value
                # (``raw`` may be a new tombstone: what the store must still find)
                return _load_and_store(key, load, policy, token=token, seen=raw)
        except RedisError:
            return load()
        if current.found:
            return current.value
        if time.monotonic() >= deadline:
            return load()  # the filler is stuck (or each lease expired under us): read it ourselves
        time.sleep(pause)
        pause = min(pause * 2, 0.025)


def _load_and_store(key: str, load: Loader, policy: Policy, *, token: str, seen: bytes | None) -> Any:
    value = _load_or_unlock(key, load, token)
    _store(key, value, policy, token=token, seen=seen)
    return value


def _load_or_unlock(key: str, load: Loader, token: str) -> Any:
    """``load()``; a load that fails releases the fill lock first."""
    try:
        return load()
    except BaseException:
        _unlock_quietly(key, token)
        raise


def _store(key: str, value: Any, policy: Policy, *, token: str, seen: bytes | None) -> bytes | None:
    """Store a fill's value while the caller holds the lock and the entry is
    still ``seen`` (cache_fill.lua); the entry stored, or None when it was
    not (a failure leaves the lease to end the lock)."""
    body, ttl_ms = encode(value, policy, _now_ms())
    try:
        stored = readmodel.cache_fill_store(key=key, token=token, seen=seen, entry=body, ttl_ms=ttl_ms)
    except RedisError:
        return None
    return body if stored else None


# --- one fill per key inside a process ---------------------------------------------------


class _Flight:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: str = "null"
        self.error: BaseException | None = None


_flights: dict[str, _Flight] = {}
_flights_lock = threading.Lock()


def _single_flight(key: str, work: Callable[[], str]) -> str:
    """Run ``work`` once for all the threads that ask for ``key`` meanwhile;
    each gets the same JSON text (and decodes its own copy: no object is
    shared between requests). A follower whose leader takes too long (past
    two leases and a bit) runs ``work`` itself."""
    with _flights_lock:
        flight = _flights.get(key)
        leader = flight is None
        if flight is None:
            flight = _flights[key] = _Flight()
    if not leader:
        if not flight.done.wait(timeout=3 * _lease_ms() / 1000):
            return work()
        if flight.error is not None:
            raise flight.error
        return flight.result
    try:
        flight.result = work()
    except BaseException as error:
        flight.error = error
        raise
    finally:
        with _flights_lock:
            _flights.pop(key, None)
        flight.done.set()
    return flight.result
