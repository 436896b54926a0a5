"""Redis bitmap strings <-> pyroaring BitMaps (the committed read state, its restores).

Redis numbers bits from the most significant bit of byte 0: bit ``n`` is
``data[n >> 3] & (0x80 >> (n & 7))``. Read bitmaps are mostly zero bytes
(a user reads some items; most users never open an announcement), so the
decoder jumps over runs of zero bytes with one regex scan and turns each set
byte into its offsets through a 256-entry table, never testing single bits.
"""

import re
from collections.abc import Iterable
from itertools import chain

from pyroaring import BitMap

# _OFFSETS[byte] = the bit positions (0 = most significant) set in ``byte``.
_OFFSETS: tuple[tuple[int, ...], ...] = tuple(
    tuple(bit for bit in range(8) if byte & (0x80 >> bit)) for byte in range(256)
)
_NONZERO_RUN = re.compile(rb"[^\x00]+")


def bitmap_from_redis(data: bytes | None, *, base: int = 0) -> BitMap:
    """The set bits of a Redis bitmap string, each plus ``base`` (a chunk's first user id)."""
    result = BitMap()
    if not data:
        return result
    for run in _NONZERO_RUN.finditer(data):
        first = base + run.start() * 8
        result.update(
            chain.from_iterable(
                (first + (i << 3) + bit for bit in _OFFSETS[byte]) for i, byte in enumerate(run.group())
            )
        )
    return result


def bitmap_to_redis(offsets: Iterable[int], *, base: int = 0) -> bytes:
    """A Redis bitmap string with bit ``offset - base`` set for every offset (b"" when empty)."""
    relative = [int(offset) - base for offset in offsets]
    if not relative:
        return b""
    if min(relative) < 0:
        raise ValueError("bitmap offsets below the base")
    data = bytearray((max(relative) >> 3) + 1)
    for offset in relative:
        data[offset >> 3] |= 0x80 >> (offset & 7)
    return bytes(data)


def bitmap_split(values: BitMap, *, size: int) -> dict[int, BitMap]:
    """Split ids into chunks of ``size`` (chunk number -> the ids inside it, still absolute)."""
    chunks: dict[int, BitMap] = {}
    if not values:
        return chunks
    for chunk in range(values.min() // size, values.max() // size + 1):
        # A BitMap of a range is a run container: the intersection is cheap.
        part = values & BitMap(range(chunk * size, (chunk + 1) * size))
        if part:
            chunks[chunk] = part
    return chunks


def bitmap_serialize(values: BitMap) -> bytes:
    """pyroaring's portable format, run-length containers where they are smaller
    (a run of readers, e.g. everyone in an id range, shrinks from 8 KiB to a few bytes)."""
    values.run_optimize()
    return bytes(values.serialize())


def bitmap_deserialize(data: bytes | memoryview | None) -> BitMap:
    """A bit-set stored with ``bitmap_serialize`` (empty when nothing is stored)."""
    return BitMap.deserialize(bytes(data)) if data else BitMap()
