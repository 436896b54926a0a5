"""The core app's Redis read model: the only core module that sends Redis commands.

It caches what every request needs and PostgreSQL would otherwise answer:
a user's platforms, and the credential lookups of authentication (token ->
the owner's fields, one GET per API request; user id -> the user's fields,
for sessions). Every entry is replaced by a tombstone after the commit that
changes its source, so a revoked token or a deactivated user stops working at
once. What is cached when, and for how long, is core/readthrough.py's policy;
this module only sends its commands.
"""

from collections.abc import Iterable

from core import keys
from core.lua import LuaScript
from core.redis import get_redis

FILL_SCRIPT = LuaScript(__file__, "lua/cache_fill.lua")
UNLOCK_SCRIPT = LuaScript(__file__, "lua/cache_unlock.lua")


# --- read-through entries (the policy is core/readthrough.py) -------------------------


def cache_entry_get(*, key: str) -> bytes | None:
    """The entry's bytes as stored (value, miss or tombstone), or None."""
    value: bytes | None = get_redis().get(key)
    return value


def cache_fill_lock(*, key: str, token: str, lease_ms: int) -> bool:
    """Take the entry's fill lock for ``lease_ms`` (SET NX PX): True when taken."""
    return bool(get_redis().set(keys.fill_lock(key), token, nx=True, px=lease_ms))


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


def health_probe() -> None:
    """Write and read one key: raises RedisError when Redis is unusable."""
    client = get_redis()
    client.set(keys.health_probe(), "1", ex=60)
    client.get(keys.health_probe())
