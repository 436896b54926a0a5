"""The core app's Redis read model: the only core module that sends Redis commands.

It caches what every request needs and PostgreSQL would otherwise answer:
a user's platforms, and the credential lookups of authentication (token ->
the owner's fields, one GET per API request; user id -> the user's fields,
for sessions). Every entry is replaced by a tombstone after the commit that
changes its source, so a revoked token or a deactivated user stops working at
once. What is cached when, and for how long, is core/readthrough.py's policy;
this module only sends its commands.
"""

from collections.abc import Iterable, Sequence
from typing import Any

from core import keys
from core.lua import LuaScript
from core.redis import get_redis, is_cluster

FILL_SCRIPT = LuaScript(__file__, "lua/cache_fill.lua")
UNLOCK_SCRIPT = LuaScript(__file__, "lua/cache_unlock.lua")
SWAP_SCRIPT = LuaScript(__file__, "lua/swap.lua")


def value_swap(*, key: str, seen: str, value: str) -> bool:
    """Set the string ``key`` to ``value`` if it still holds ``seen``; whether it did."""
    return bool(SWAP_SCRIPT([key], [seen, value]))


# --- read-through entries (the policy is core/readthrough.py) -------------------------


def cache_entry_get(*, key: str) -> bytes | None:
    """The entry's bytes as stored (value, miss or tombstone), or None."""
    value: bytes | None = get_redis().get(key)
    return value


def cache_entries_get(*, entry_keys: Sequence[str]) -> list[bytes | None]:
    """Several entries' bytes in one round trip: one MGET on a single Redis
    (one reply to parse instead of one per key); on a cluster, where each
    key has a slot of its own, a pipeline of GETs."""
    if not entry_keys:
        return []
    client = get_redis()
    if not is_cluster():
        return list(client.mget(entry_keys))
    pipe = client.pipeline(transaction=False)
    for key in entry_keys:
        pipe.get(key)
    return list(pipe.execute())


def cache_fill_lock(*, key: str, token: str, lease_ms: int) -> bool:
    """Take the entry's fill lock for ``lease_ms`` (SET NX PX): True when taken."""
    return bool(get_redis().set(keys.fill_lock(key), token, nx=True, px=lease_ms))


def cache_fill_lock_queue(pipe: Any, *, key: str, token: str, lease_ms: int) -> None:
    """Queue ``cache_fill_lock``'s SET NX PX on a caller's pipeline (its reply
    says whether the lock was taken): a filler that reads other keys first
    takes the lock in the same round trip."""
    pipe.set(keys.fill_lock(key), token, nx=True, px=lease_ms)


def cache_fill_lock_and_look(*, key: str, token: str, lease_ms: int) -> tuple[bool, bytes | None]:
    """Take the entry's fill lock as ``cache_fill_lock`` does and read the entry
    in the same round trip (lock first): a filler that stored and released
    between the caller's miss and this lock is seen here, not read again from
    PostgreSQL. Both keys share the entry's hash tag."""
    return cache_fill_locks_and_look(entry_keys=[key], token=token, lease_ms=lease_ms)[0]


def cache_fill_locks_and_look(
    *, entry_keys: Sequence[str], token: str, lease_ms: int
) -> list[tuple[bool, bytes | None]]:
    """``cache_fill_lock_and_look`` for several entries in one round trip."""
    pipe = get_redis().pipeline(transaction=False)
    for key in entry_keys:
        pipe.set(keys.fill_lock(key), token, nx=True, px=lease_ms)
        pipe.get(key)
    replies = pipe.execute()
    return [(bool(replies[i]), replies[i + 1]) for i in range(0, len(replies), 2)]


def cache_fill_store(*, key: str, token: str, seen: bytes | None, entry: bytes, ttl_ms: int) -> bool:
    """Write ``entry`` if the caller still holds the lock and the entry is still
    the one it saw before reading PostgreSQL (cache_fill.lua); releases the lock."""
    args = [token, "0" if seen is None else "1", seen or b"", entry, max(1, int(ttl_ms))]
    return bool(FILL_SCRIPT([key, keys.fill_lock(key)], args))


def cache_fill_unlock(*, key: str, token: str) -> None:
    UNLOCK_SCRIPT([keys.fill_lock(key)], [token])


def cache_invalidate(*, entry_keys: Iterable[str], tombstone: bytes, ttl_ms: int) -> None:
    """Replace each entry with ``tombstone`` (read as a miss): a fill that read
    PostgreSQL before the change then finds an entry it did not see and drops
    its copy. The keys may lie in several slots: one pipeline, no transaction."""
    names = list(entry_keys)
    if not names:
        return
    client = get_redis()
    if len(names) == 1:
        client.set(names[0], tombstone, px=ttl_ms)
        return
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.set(name, tombstone, px=ttl_ms)
    pipe.execute()


# --- activity bitmaps (the policy is insight/activity.py) ---------------------------------


def health_probe() -> None:
    """Write and read one key: raises RedisError when Redis is unusable."""
    client = get_redis()
    client.set(keys.health_probe(), "1", ex=60)
    client.get(keys.health_probe())
