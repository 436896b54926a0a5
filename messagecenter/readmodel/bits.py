"""A user's per-month bit-sets (push, read, ever-read) as Python reads and
writes them: the Lua side is ``messagecenter/lua/_bits.lua``.

Bit ``n`` is the item at offset ``n`` of the month. A key is either a Redis
set of offsets (sparse: ~4 bytes an offset, whatever the month's size) or a
bitmap string (dense: one bit per offset of the month up to the highest).
Readers do not know the form beforehand: ``queue`` asks for both (GET and
SMEMBERS) in the caller's pipeline, one of them fails with WRONGTYPE, and
``take`` keeps the other. One round trip, whatever the form.
"""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pyroaring import BitMap
from redis.client import Pipeline
from redis.exceptions import NoScriptError, ResponseError

from core.bitmaps import bitmap_from_redis, bitmap_to_redis
from core.lua import LuaScript
from core.redis import get_redis, is_cluster

BIT_GET = LuaScript(__file__, "../lua/bit_get.lua", preambles=("../lua/_bits.lua",))
# _bits.lua's BITS_SET_MAX: Redis's default set-max-intset-entries, the most
# offsets a set keeps before it becomes a bitmap.
SET_MAX = 512


@dataclass(frozen=True)
class Bits:
    """One key's bits: ``bitmap`` (the string form), else ``offsets`` (the set
    form); both None when the key is missing (every bit 0)."""

    bitmap: bytes | None = None
    offsets: frozenset[int] | None = None

    @property
    def exists(self) -> bool:
        return self.bitmap is not None or self.offsets is not None

    def __contains__(self, offset: int) -> bool:
        if self.offsets is not None:
            return offset in self.offsets
        data = self.bitmap
        if not data:
            return False
        byte = offset >> 3
        return byte < len(data) and bool((data[byte] >> (7 - (offset & 7))) & 1)

    def to_bitmap(self) -> BitMap:
        """Every set bit's offset."""
        if self.offsets is not None:
            return BitMap(self.offsets)
        return bitmap_from_redis(self.bitmap)


def is_dense(offsets: BitMap) -> bool:
    """_bits.lua's rule: a bitmap (up to the highest offset) is no bigger than
    the set (~4 bytes an offset), or the set would pass SET_MAX."""
    count = len(offsets)
    if count == 0:
        return False
    return count > SET_MAX or 4 * count >= (offsets.max() >> 3) + 1


def queue(pipe: Pipeline, key: str) -> None:
    """Ask for ``key`` in either form (two replies: ``take`` reads them)."""
    pipe.get(key)
    pipe.smembers(key)


def _wrong_type(reply: Any) -> bool:
    return isinstance(reply, ResponseError) and str(reply).startswith("WRONGTYPE")


def execute(pipe: Pipeline) -> list[Any]:
    """Run a pipeline holding ``queue``'d keys: the WRONGTYPE refusals of the
    form a key is not in stay in the replies for ``take``; any other error raises."""
    replies = pipe.execute(raise_on_error=False)
    for reply in replies:
        if isinstance(reply, Exception) and not _wrong_type(reply):
            raise reply
    return replies


def take(replies: Iterator[Any]) -> Bits:
    """The next ``queue``'d key from ``execute``'s replies."""
    raw, members = next(replies), next(replies)
    if raw is not None and not _wrong_type(raw):
        return Bits(bitmap=bytes(raw))
    if members and not _wrong_type(members):
        return Bits(offsets=frozenset(int(m) for m in members))
    return Bits()


def read_many(names: Iterable[str]) -> list[Bits]:
    """Several keys in one round trip (one slot each on a cluster: redis-py splits the pipeline)."""
    wanted = list(names)
    if not wanted:
        return []
    pipe = get_redis().pipeline(transaction=False)
    for name in wanted:
        queue(pipe, name)
    replies = iter(execute(pipe))
    return [take(replies) for _ in wanted]


def has_many(names: Iterable[str], offset: int) -> list[bool]:
    """Whether bit ``offset`` is set in each key, one round trip, no key's
    whole bitmap on the wire for one bit. On a single Redis one call of
    ``bit_get.lua`` per key (the script asks the key's form); on a cluster
    GETBIT and SISMEMBER for every key (the form a key is not in refuses
    with WRONGTYPE), where a script's NOSCRIPT would need every node loaded."""
    wanted = list(names)
    if not wanted:
        return []
    client = get_redis()
    if is_cluster():
        pipe = client.pipeline(transaction=False)
        for name in wanted:
            pipe.getbit(name, offset)
            pipe.sismember(name, offset)
        replies = execute(pipe)
        return [
            any(not _wrong_type(reply) and bool(reply) for reply in replies[i : i + 2])
            for i in range(0, len(replies), 2)
        ]
    for _attempt in range(2):
        pipe = client.pipeline(transaction=False)
        for name in wanted:
            BIT_GET.queue(pipe, [name], [offset])
        replies = pipe.execute(raise_on_error=False)
        if not any(isinstance(reply, NoScriptError) for reply in replies):
            break
        # A restarted or flushed Redis lost the script: load it, send the batch again.
        BIT_GET.load(client)
    return [
        bool(BIT_GET.settle(reply, [name], [offset], client=client))
        for name, reply in zip(wanted, replies, strict=True)
    ]


def encode(offsets: BitMap) -> tuple[str, bytes | str]:
    """How restore.lua writes these offsets: ("b", a bitmap string) when
    dense, else ("s", the offsets joined by ","); ("b", b"") when empty."""
    if not offsets:
        return "b", b""
    if is_dense(offsets):
        return "b", bitmap_to_redis(offsets)
    return "s", ",".join(map(str, offsets))
