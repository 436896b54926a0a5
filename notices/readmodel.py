"""The announcements' Redis read model; the only notices module that talks to Redis.

Layout (names in ``core.keys``), per platform ``p`` and user-id chunk ``c``
(``MESSAGECENTER_NOTICE_CHUNK_USERS`` ids per chunk), all under the hash tag
``{p}`` (chunk 0) or ``{p:c}``:

- ``notice:{p}:<id>``     bitmap of a window of the chunk (the span of its readers:
  a head saying the window's first byte s, then bit i = user ``8 * s + i`` of
  the chunk, see lua/_bits.lua), 1 = read;
- ``notice:{p}:index``    zset of the platform's not-yet-expired announcement ids,
  score = publish time in ms (scheduled ones included: time filters at read);
- ``notice:{p}:expire``   zset, score = expiry time in ms (absent: never);
- ``notice:{p}:meta``     hash ``rev`` / ``token`` of the index build, ``t`` the chunk time;
- ``notice:{p}:reads:<b>`` read counters of ``NOTICE_BLOCK_USERS`` users, each as
  wide (4 to 32 bits) and the block as long as its counters need;
- ``notice:layout``       the layout of all of the above (format, users per chunk):
  Redis holding another is rebuilt from PostgreSQL, never read (see ``layout``).

Publishing writes the index of each built chunk (a handful), never per user.
A user's count is their counter (announcements live at the chunk time ``t``
they read) plus the few whose publish or expiry time passed since ``t``; a
list page reads the bits of its own announcements only. The process keeps a
copy of each chunk index under the meta token (times, sorted for bisection),
and the scripts answer ``-1`` when the token moved (refresh, retry).
Indexes are snapshots of PostgreSQL: rebuilt after every committed change and,
when missing (new chunk, flushed Redis), on first read.
"""

import bisect
import itertools
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone
from pyroaring import BitMap
from redis.exceptions import RedisError

from accounts.platforms import ALL_PLATFORMS
from core.api.errors import LimitExceeded
from core.bitmaps import bitmap_from_redis, bitmap_split, bitmap_to_redis
from core.local_cache import LocalCache
from core.lua import LuaScript
from core.redis import RedisClient, get_redis, is_cluster
from durability import healing
from insight.reports import HOUR_MS, READ_HOURS_TTL_SECONDS, hours_from_hashes
from live.transport import inbox_changed
from notices import keys as notice_keys
from notices.models import Announcement
from notices.read_rows import announcement_chunk_readers

_COUNTERS = ("lua/_bits.lua", "lua/_counters.lua", "lua/_readers.lua")
_READ_STATE = LuaScript(__file__, "lua/read_state.lua", preambles=("lua/_bits.lua",))
_SNAPSHOT = LuaScript(__file__, "lua/snapshot.lua")
_SYNC_CHUNK = LuaScript(__file__, "lua/sync_chunk.lua", preambles=_COUNTERS)
# Adding one announcement: the revision first, then each built chunk.
_ADD_REVISION = LuaScript(__file__, "lua/add_revision.lua")
_ADD_CHUNK = LuaScript(__file__, "lua/add_chunk.lua")
_MARK = LuaScript(__file__, "lua/mark.lua", preambles=_COUNTERS)
_ADVANCE = LuaScript(__file__, "lua/advance.lua", preambles=_COUNTERS)
_RESTORE_BITMAP = LuaScript(__file__, "lua/restore_bitmap.lua", preambles=_COUNTERS)
COUNT_SCRIPT = LuaScript(__file__, "lua/count.lua", preambles=_COUNTERS)

logger = logging.getLogger(__name__)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ATTEMPTS = 4
# Users per read-counter block: 1 KiB at 4-bit counters (16 KiB at most, at 64-bit
# widths never reached). Changing it changes what a block key holds: bump LAYOUT_FORMAT.
NOTICE_BLOCK_USERS = 2048
# The format of the read state in Redis, recorded with the chunk size in
# notice_keys.layout(). 1 (never recorded): u16 counter blocks of full size.
# 2: counter blocks as wide and as long as needed (notices/lua/_counters.lua).
# 3: read bitmaps hold the window of the chunk their readers span (_bits.lua).
LAYOUT_FORMAT = 3
# A read bitmap's head (lua/_bits.lua): one byte s / 16 for a window starting
# at a multiple s of 16 below _WINDOW_SHORT, else 255 and s in 4 bytes.
_WINDOW_STEP = 16
_WINDOW_SHORT = 255 * _WINDOW_STEP
_BLOCK_WIDTHS = (4, 8, 16, 32)
# Publish and expiry times one advance.lua call moves the chunk time over at most
# (each costs a pass over that announcement's bitmap in the chunk).
ADVANCE_BATCH = 64
_HOUR_MS = HOUR_MS
# Per-hour read counters outlive any announcement worth charting; the
# lifetime, renewed on every read, frees them after a delete without a sweep.
_READ_HOURS_TTL_SECONDS = READ_HOURS_TTL_SECONDS

# (platform, chunk) -> (token, ids): the ids whose bitmaps go into KEYS.
# Entries are replaced whole, and a stale entry is caught by the token check
# inside the script.
ids_cache: "LocalCache[tuple[str, int], ChunkIndex]" = LocalCache("announcement id lists", maxsize=4096)

Entry = tuple[int, int, int | None]  # (announcement id, publish ms, expire ms or None)


class IndexUnsettled(RedisError):
    """The index kept changing under the reader; callers treat it like Redis being down."""


class LayoutMismatch(RedisError):
    """Redis holds read state laid out for another chunk size or format: callers treat it
    like Redis being down until the rebuild lays it out again (see ``layout``)."""


def to_ms(value: datetime) -> int:
    return (value - _EPOCH) // timedelta(milliseconds=1)


def from_ms(value: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=value)


def user_slot(user_id: int) -> tuple[int, int]:
    """(chunk, bit offset) of a user; ids outside the supported range fail before Redis."""
    user_id = int(user_id)
    if user_id < 0 or user_id > int(settings.MESSAGECENTER_MAX_USER_ID):
        raise LimitExceeded(
            f"User id {user_id} is outside the supported range 0..{settings.MESSAGECENTER_MAX_USER_ID}.",
            fields={"user_id": ["Out of range."]},
        )
    return divmod(user_id, _chunk_users())


def _chunk_users() -> int:
    return int(settings.MESSAGECENTER_NOTICE_CHUNK_USERS)


def _block_users() -> int:
    return min(NOTICE_BLOCK_USERS, _chunk_users())


def _block_keys(platform: str, chunk: int) -> list[str]:
    """The chunk's read-counter blocks, in order (every script that moves all readers takes them all)."""
    return [notice_keys.reads(platform, chunk, b) for b in range(-(-_chunk_users() // _block_users()))]


def _counter_of(offset: int) -> tuple[int, int]:
    """(block, counter index in the block) of a user's read counter."""
    block, index = divmod(offset, _block_users())
    return block, index


def _pack_block(counts: Sequence[int]) -> bytes:
    """A counter block as _counters.lua reads it: the narrowest width that holds every
    count, up to the last non-zero counter; b"" when all are zero (no key)."""
    last = max((i for i, c in enumerate(counts) if c), default=-1)
    if last < 0:
        return b""
    used = [min(int(c), 2**32 - 1) for c in counts[: last + 1]]
    top = max(used)
    width = next(w for w in _BLOCK_WIDTHS if top < 2**w)
    if width == 4:
        if len(used) % 2:
            used.append(0)
        body = bytes((used[i] << 4) | used[i + 1] for i in range(0, len(used), 2))
    else:
        body = b"".join(c.to_bytes(width // 8, "big") for c in used)
    return bytes([width]) + body


def _window_head(byte: int) -> tuple[bytes, int]:
    """(head, first byte) of a window holding byte ``byte`` of a chunk (as notice_head_for)."""
    start = byte - byte % _WINDOW_STEP
    if start < _WINDOW_SHORT:
        return bytes([start // _WINDOW_STEP]), start
    return b"\xff" + byte.to_bytes(4, "big"), byte


def _window_of(data: bytes | None) -> tuple[int, int] | None:
    """(first byte, head length) of a read bitmap string, None when empty."""
    if not data:
        return None
    if data[0] < 255:
        return data[0] * _WINDOW_STEP, 1
    return int.from_bytes(data[1:5], "big"), 5


def window_to_redis(users: BitMap, *, base: int) -> bytes:
    """The read bitmap (lua/_bits.lua's window) of these user ids of the chunk whose
    first id is ``base``: from the lowest one's byte on (b"" when none)."""
    if not users:
        return b""
    head, first = _window_head((int(users.min()) - base) >> 3)
    return head + bitmap_to_redis(users, base=base + 8 * first)


def window_from_redis(data: bytes | None, *, base: int = 0, format: int = LAYOUT_FORMAT) -> BitMap:
    """The user ids (each plus ``base``) of a read bitmap; ``format`` below 3: a plain
    bitmap of the whole chunk (what a layout change reads before clearing it)."""
    if format < 3:
        return bitmap_from_redis(data, base=base)
    window = _window_of(data)
    if data is None or window is None:
        return BitMap()
    first, head = window
    return bitmap_from_redis(data[head:], base=base + 8 * first)


def _window_bit(data: bytes | None, offset: int) -> bool:
    window = _window_of(data)
    if data is None or window is None:
        return False
    first, head = window
    pos = offset - 8 * first
    byte = head + (pos >> 3)
    return pos >= 0 and byte < len(data) and bool(data[byte] & (0x80 >> (pos & 7)))


def counter_from_block(data: bytes | None, index: int) -> int:
    """Counter ``index`` of a block string (``_pack_block``'s format): for checks and tests."""
    if not data:
        return 0
    width = data[0]
    start, end = 8 + index * width, 8 + (index + 1) * width
    if end > len(data) * 8:
        return 0
    value = int.from_bytes(data[start // 8 : -(-end // 8)], "big")
    return (value >> ((-end) % 8)) & (2**width - 1)


def user_id_of(user: Any) -> int:
    """The integer id a user's bits live at (callers pass authenticated users)."""
    if user.pk is None:
        raise LimitExceeded("Anonymous users have no read state.")
    return int(user.pk)


# --- Layout ----------------------------------------------------------------------------
# Bit offsets are user ids within a chunk, and counter blocks have a format:
# read state written under another chunk size (a changed setting) or format
# (an upgrade) would be misread, not merely missed. Redis records the layout
# it holds; a process checks it once (and again whenever its own setting
# changes) before its first call, and a mismatch makes the read model "lost":
# every process answers from PostgreSQL while the rebuild (which lays the
# state out anew, see ``layout_adopt``) restores the marks from PostgreSQL.

# "held": the layout this process found Redis holding
_layout_seen: LocalCache[str, str] = LocalCache("announcement layout seen", maxsize=1)


def layout() -> str:
    """This process's read-state layout: ``<format>:<users per chunk>``."""
    return f"{LAYOUT_FORMAT}:{_chunk_users()}"


def _held_layout(client: RedisClient) -> str | None:
    """The layout Redis holds; a Redis with no read state at all takes ours."""
    raw = client.get(notice_keys.layout())
    if raw is None and not client.exists(notice_keys.chunks()):
        # New or flushed (whatever refills it writes under this layout). Read
        # state from before layouts were recorded always has the chunk set.
        client.set(notice_keys.layout(), layout(), nx=True)
        raw = client.get(notice_keys.layout())
    return None if raw is None else raw.decode()


def _client() -> RedisClient:
    """The Redis client, once this process knows Redis holds its layout (LayoutMismatch if not)."""
    client = get_redis()
    want = layout()
    if _layout_seen.get("held") == want:
        return client
    held = _held_layout(client)
    if held != want:
        logger.error(
            "announcement read state in Redis is laid out as %s, this process as %s: rebuilding it", held, want
        )
        healing.invalidate()
        healing.check(fresh=True)  # starts the rebuild where healing is on
        raise LayoutMismatch(f"announcement read state laid out as {held}, expected {want}")
    _layout_seen["held"] = want
    return client


def _register_chunks(client: Any, chunks: Sequence[int]) -> None:
    """Add chunks to the chunk set, with the layout they are written under.

    Only a process that found Redis holding its layout writes read state, but
    Redis may have lost everything since it looked (a flush, a restart without
    persistence): the chunk set would then come back without the layout, which
    every process reads as read state of an unknown, older layout. So the set
    never comes back alone (two commands, one per slot; ``client`` may be a pipeline)."""
    client.set(notice_keys.layout(), layout(), nx=True)
    client.sadd(notice_keys.chunks(), *chunks)


def layout_adopt() -> bool:  # noqa: C901  the layout switch's steps read best in one place; radon 13
    """Make Redis hold this process's layout (the rebuild's first step). Read state of
    another layout is deleted whole, the generation marker with it (so every process
    answers from PostgreSQL until the rebuild ends); the rebuild then restores it from
    PostgreSQL. The per-hour first-read counts, kept in Redis only, are summed into
    chunk 0's. Returns True when it deleted anything."""
    client = get_redis()
    want = layout()
    if _held_layout(client) == want:
        _layout_seen["held"] = want
        return False
    healing.invalidate()
    kept = {notice_keys.layout(), *(notice_keys.revision(p) for p in ALL_PLATFORMS)}
    hours: dict[tuple[str, int], dict[bytes, int]] = {}
    batch: list[str] = []

    def purge() -> None:
        pipe = client.pipeline(transaction=False)
        for key in batch:
            if notice_keys.read_hours_of(key) is not None:
                pipe.hgetall(key)
        found = iter(pipe.execute())
        pipe = client.pipeline(transaction=False)
        for key in batch:
            owner = notice_keys.read_hours_of(key)
            if owner is not None:
                counts = hours.setdefault(owner, {})
                for hour, n in next(found).items():
                    counts[hour] = counts.get(hour, 0) + int(n)
            pipe.delete(key)  # one key per DEL: a multi-key DEL fails across cluster slots
        pipe.execute()
        batch.clear()

    for raw in client.scan_iter(match=notice_keys.scan_pattern(), count=1000):
        key = raw.decode() if isinstance(raw, bytes) else str(raw)
        if key not in kept:
            batch.append(key)
        if len(batch) >= 1000:
            purge()
    purge()
    pipe = client.pipeline(transaction=False)
    for (platform, pk), counts in hours.items():
        target = notice_keys.read_hours(platform, 0, pk)
        for hour, n in counts.items():
            pipe.hincrby(target, hour, n)
        pipe.expire(target, _READ_HOURS_TTL_SECONDS)
    pipe.set(notice_keys.layout(), want)
    pipe.execute()
    ids_cache.clear()
    _layout_seen["held"] = want
    logger.warning("announcement read state cleared for layout %s; the rebuild restores it", want)
    return True


# Every publish reads this (platform_sync): one plain statement, not a
# compiled ORM query, with the times in epoch milliseconds from PostgreSQL
# (floored, as to_ms floors) so no row's timestamps are parsed in Python; the
# cost per live announcement stays small. Tables and columns are
# Announcement's and AnnouncementPlatform's (a test holds the result to the ORM).
def _platform_entries(platform: str) -> list[Entry]:
    """The platform's announcements that have not expired, from PostgreSQL.

    Expired ones are left out so indexes (and the KEYS of every count) stay
    bounded; their bitmaps remain for statistics until the announcement is deleted.
    Uses the index announcementplatform_idx. Runs on a publish, an edit or a
    rebuild, never on a read: one query, times floored to the millisecond here.
    """
    now = timezone.now()
    rows = (
        Announcement.objects.filter(platform_rows__platform=platform)
        .filter(Q(expire_at__isnull=True) | Q(expire_at__gt=now))
        .values_list("id", "publish_at", "expire_at")
    )
    return [(int(pk), to_ms(publish), None if expire is None else to_ms(expire)) for pk, publish, expire in rows]


def _chunk_keys(platform: str, chunk: int) -> list[str]:
    return [notice_keys.meta(platform, chunk), notice_keys.index(platform, chunk), notice_keys.expiry(platform, chunk)]


def _write_chunk(
    client: RedisClient, *, platform: str, chunk: int, rev: int, entries: Sequence[Entry], drop_ids: Iterable[int]
) -> None:
    drops = [int(pk) for pk in drop_ids]
    token = uuid.uuid4().hex
    # One round trip when the chunk is built (every publish after the first):
    # the script checks the chunk time itself and refuses, changing nothing, if not.
    if _sync(client, platform=platform, chunk=chunk, rev=rev, token=token, entries=entries, drops=drops) == -1:
        # First build of the chunk (a new id range, or Redis lost its data):
        # the committed read rows go back in whole and are counted before the index opens
        # (mark.lua moves no counter until the chunk has its time).
        build = _restore_chunk(client, platform=platform, chunk=chunk, entries=entries)
        _sync(client, platform=platform, chunk=chunk, rev=rev, token=token, entries=entries, drops=drops, build=build)
    ids_cache.pop((platform, chunk), None)


def _sync(
    client: RedisClient,
    *,
    platform: str,
    chunk: int,
    rev: int,
    token: str,
    entries: Sequence[Entry],
    drops: Sequence[int],
    build: tuple[int, list[bytes]] | None = None,
) -> int:
    """One sync_chunk.lua call; it needs the bitmap of every announcement whose
    liveness at the chunk time changes: those of the new entries, the drops and
    the process's copy first, the index's own ids when that was not enough."""
    blocks = _block_keys(platform, chunk)
    ids = {pk for pk, _, _ in entries} | set(drops)
    cached = ids_cache.get((platform, chunk))
    if cached is not None:
        ids |= set(cached.times)
    for _ in range(_ATTEMPTS):
        ordered = sorted(ids)
        args: list[Any] = [rev, token, "0" if build else "1", len(blocks), _block_users(), build[0] if build else 0]
        args.append(len(entries))
        for pk, publish_ms, expire_ms in entries:
            args.extend((pk, publish_ms, "" if expire_ms is None else expire_ms))
        args.extend(ordered)
        args.append(len(drops))
        args.extend(drops)
        if build:
            args.extend(build[1])
        script_keys = [
            *_chunk_keys(platform, chunk),
            *blocks,
            *(notice_keys.bitmap(platform, chunk, pk) for pk in ordered),
        ]
        result = int(_SYNC_CHUNK(keys=script_keys, args=args, client=client))
        if result != -3:
            return result
        ids |= {int(pk) for pk in client.zrange(notice_keys.index(platform, chunk), 0, -1)}
    raise IndexUnsettled(f"announcement index of {platform}/{chunk} kept changing")


def _built_chunks(client: RedisClient) -> list[int]:
    # Chunk 0 always: it holds most users, and its keys keep the plain
    # ``notice:<platform>:<id>`` shape current.
    return sorted({0} | {int(c) for c in client.smembers(notice_keys.chunks())})


def platform_sync(*, platform: str, drop_ids: Iterable[int] = ()) -> None:
    """Rebuild every built chunk index of ``platform`` from PostgreSQL, dropping the
    bitmaps of ``drop_ids`` (announcements deleted or taken off the platform).

    Called after commit. The revision is taken before PostgreSQL is read: of two
    racing rebuilds the later revision saw every commit, and the script keeps it.
    """
    client = _client()
    # One round trip; the chunk list is read after the revision is taken, so a
    # chunk registered later (_build_chunk) reads this revision or a newer one.
    pipe = client.pipeline(transaction=False)
    pipe.incr(notice_keys.revision(platform))
    _register_chunks(pipe, [0])
    pipe.smembers(notice_keys.chunks())
    rev_raw, _, _, chunks_raw = pipe.execute()
    rev = int(rev_raw)
    revisions[platform] = rev
    entries = _platform_entries(platform)
    drops = list(drop_ids)
    for chunk in sorted({0} | {int(c) for c in chunks_raw}):
        _write_chunk(client, platform=platform, chunk=chunk, rev=rev, entries=entries, drop_ids=drops)


# platform -> the last revision this process took (platform_sync, platform_add):
# the fence of the next incremental add (see platform_add). Read before the
# publish commits (platform_revision_seen), so whatever it holds was taken
# before that commit; another process's revision since then only costs that
# add its fast path.
revisions: LocalCache[str, int] = LocalCache("announcement revisions taken", maxsize=64)


def platform_revision_seen(*, platform: str) -> int | None:
    """The last revision of ``platform`` this process took, or None (no Redis call)."""
    return revisions.get(platform)


def platform_add(*, platform: str, entry: Entry, seen: int | None) -> bool:
    """Add a NEW announcement (committed, on ``platform``) to every built chunk
    index without reading PostgreSQL; falls back to ``platform_sync``.

    ``seen`` is ``platform_revision_seen`` read before the announcement's
    commit. The add happens only while the platform's revision is still
    ``seen`` and every chunk is built at it (add_chunk.lua says why that keeps
    a rebuild that started after the commit, which may hold a newer state of
    the row, from being overwritten); the entry then goes in under a new
    revision, so an older rebuild still in flight is refused and a newer one
    includes the row anyway. Each script stays in one slot (the revision and
    each chunk have their own): on a single Redis one pipeline (revision and
    chunk set), then the calls of every built chunk in one round trip; on
    Redis Cluster one more for the chunk set and one call per chunk. Returns
    True when it added without a rebuild.
    """
    expire_ms = entry[2]
    now_ms = to_ms(timezone.now())
    if expire_ms is not None and expire_ms <= now_ms:
        return True  # a rebuild would leave it out too: nothing to add
    added = seen is not None and _add(platform=platform, entry=entry, seen=seen, now_ms=now_ms)
    if not added:
        platform_sync(platform=platform)
    return added


def _add(*, platform: str, entry: Entry, seen: int, now_ms: int) -> bool:
    client = _client()
    pk, publish_ms, expire_ms = entry
    rev_call = (notice_keys.revision(platform),), (seen,)
    if is_cluster():
        rev = int(_ADD_REVISION(keys=rev_call[0], args=rev_call[1], client=client))
        chunks_raw = client.smembers(notice_keys.chunks()) if rev != -1 else set()
    else:
        # One round trip: on a single Redis the pipeline runs in order, so the
        # chunk set is read after the revision moved on.
        pipe = client.pipeline(transaction=False)
        _ADD_REVISION.queue(pipe, rev_call[0], rev_call[1])
        pipe.smembers(notice_keys.chunks())
        rev_reply, chunks_raw = pipe.execute(raise_on_error=False)
        rev = int(_ADD_REVISION.settle(rev_reply, rev_call[0], rev_call[1], client=client))
        if isinstance(rev_reply, Exception) and rev != -1:
            # Refused unknown (a flushed script cache) and run again since: the
            # chunk set above was read before the revision moved.
            chunks_raw = client.smembers(notice_keys.chunks())
    if rev == -1:
        return False
    # A chunk registered after the revision moved (_build_chunk) reads that
    # revision or a newer one, and PostgreSQL after our commit: it holds the row.
    chunks = sorted({0} | {int(c) for c in chunks_raw})
    token = uuid.uuid4().hex
    expire = "" if expire_ms is None else int(expire_ms)
    calls = [
        (_chunk_keys(platform, chunk), [seen, f"{token}:{chunk}", int(pk), int(publish_ms), expire, now_ms, rev])
        for chunk in chunks
    ]
    if is_cluster():
        replies = [_ADD_CHUNK(keys=chunk_keys, args=args, client=client) for chunk_keys, args in calls]
    else:
        # Every chunk's call in one round trip (a platform of a million users
        # has about thirty chunks): each call is one script in its own slot.
        replies = _ADD_CHUNK.stream(calls, client=client)
    added = all(bool(int(reply)) for reply in replies)
    for chunk in chunks:
        ids_cache.pop((platform, chunk), None)
    if added:
        revisions[platform] = rev
    return added


def _build_chunk(client: RedisClient, *, platform: str, chunk: int) -> None:
    """Build a chunk that has no index yet (first user of a new id range, flushed Redis).

    Registered first, so a concurrent platform_sync either sees the chunk or ran
    its revision before ours, in which case our snapshot holds its commit.
    """
    _register_chunks(client, [chunk])
    rev = int(client.get(notice_keys.revision(platform)) or 0)
    _write_chunk(client, platform=platform, chunk=chunk, rev=rev, entries=_platform_entries(platform), drop_ids=())


_NEWEST_FIRST = -(2**63)  # below every (-publish, -id) key of a copy


@dataclass(frozen=True)
class ChunkIndex:
    """A process-local copy of one (platform, chunk) index, valid under ``token``,
    sorted once so every question a read asks is a bisection, never a walk."""

    token: str
    times: dict[int, tuple[int, int | None]]  # id -> (publish ms, expire ms or None)
    newest: list[tuple[int, int]]  # (-publish, -id) ascending: newest first
    publishes: list[int]  # publish times of the entries that can be live, ascending
    publish_ids: list[int]
    expiries: list[int]  # their expiry times (those that expire), ascending
    expiry_ids: list[int]

    @classmethod
    def build(cls, token: str, entries: Iterable[Entry]) -> "ChunkIndex":
        times = {pk: (publish, expire) for pk, publish, expire in entries}
        # An entry that expires before it is published is never live: it takes
        # no part in counts, so it stays out of the time lists.
        valid = [(pk, p, e) for pk, (p, e) in times.items() if e is None or p < e]
        by_publish = sorted((p, pk) for pk, p, _ in valid)
        by_expiry = sorted((e, pk) for pk, _, e in valid if e is not None)
        return cls(
            token=token,
            times=times,
            newest=sorted((-p, -pk) for pk, (p, _) in times.items()),
            publishes=[p for p, _ in by_publish],
            publish_ids=[pk for _, pk in by_publish],
            expiries=[e for e, _ in by_expiry],
            expiry_ids=[pk for _, pk in by_expiry],
        )

    def live(self, pk: int, at: int) -> bool:
        found = self.times.get(pk)
        return found is not None and found[0] <= at and (found[1] is None or at < found[1])

    def live_count(self, at: int) -> int:
        # An entry expired by ``at`` was published before it (the lists hold no other).
        return bisect.bisect_right(self.publishes, at) - bisect.bisect_right(self.expiries, at)

    def moments(self, start: int, end: int) -> list[int]:
        """Publish and expiry times in (start, end], ascending."""
        found: list[int] = []
        for moments in (self.publishes, self.expiries):
            found.extend(moments[bisect.bisect_right(moments, start) : bisect.bisect_right(moments, end)])
        return sorted(found)

    def changes(self, start: int, end: int) -> dict[int, int]:
        """id -> live at ``end`` minus live at ``start`` (1 or -1), for the entries that differ."""
        low, high = min(start, end), max(start, end)
        touched: set[int] = set()
        for moments, ids in ((self.publishes, self.publish_ids), (self.expiries, self.expiry_ids)):
            touched.update(ids[bisect.bisect_right(moments, low) : bisect.bisect_right(moments, high)])
        found = {}
        for pk in sorted(touched):
            delta = int(self.live(pk, end)) - int(self.live(pk, start))
            if delta:
                found[pk] = delta
        return found

    def page(self, at: int, after: tuple[int, int] | None, limit: int) -> list[tuple[int, int]]:
        """Up to ``limit`` (publish ms, id) live at ``at``, newest first, strictly below ``after``.

        Starts by bisection; only entries expired but not yet pruned from the
        index are stepped over (a rebuild or a publish prunes them)."""
        start = bisect.bisect_left(self.newest, (-at, _NEWEST_FIRST))
        if after is not None:
            start = max(start, bisect.bisect_right(self.newest, (-after[0], -after[1])))
        found: list[tuple[int, int]] = []
        for neg_publish, neg_pk in itertools.islice(self.newest, start, None):
            if len(found) >= limit:
                break
            if self.live(-neg_pk, at):
                found.append((-neg_publish, -neg_pk))
        return found


def _chunk_index(client: RedisClient, *, platform: str, chunk: int) -> ChunkIndex:
    cached = ids_cache.get((platform, chunk))
    if cached is not None:
        return cached
    for _ in range(_ATTEMPTS):
        snapshot = _SNAPSHOT(keys=_chunk_keys(platform, chunk), client=client)
        if snapshot:
            entries = (
                (int(snapshot[i]), int(float(snapshot[i + 1])), int(snapshot[i + 2]) if snapshot[i + 2] else None)
                for i in range(1, len(snapshot), 3)
            )
            index = ChunkIndex.build(snapshot[0].decode(), entries)
            ids_cache[(platform, chunk)] = index
            return index
        _build_chunk(client, platform=platform, chunk=chunk)
    raise IndexUnsettled(f"announcement index of {platform}/{chunk} could not be built")


def _read_bits(
    client: RedisClient, *, platform: str, chunk: int, offset: int, index: ChunkIndex, ids: Sequence[int]
) -> list[bool] | None:
    """The user's bits of these announcements of the copy; None when the copy is stale.

    The token is checked even when the copy finds none of the asked ids live:
    another process may have added one since this copy was read (a publish
    pops only its own process's copies), and "none live" from a stale copy
    would be a wrong 404 or an empty page, not a cheap answer."""
    reply = _READ_STATE(
        keys=[notice_keys.meta(platform, chunk), *(notice_keys.bitmap(platform, chunk, pk) for pk in ids)],
        args=[index.token, offset],
        client=client,
    )
    if reply == -1:
        ids_cache.pop((platform, chunk), None)
        return None
    bits = reply.decode() if isinstance(reply, bytes) else str(reply)
    return [bit == "1" for bit in bits]


def read_state(*, platform: str, user_id: int, now: datetime) -> dict[int, tuple[int, bool]]:
    """Live announcements of ``platform`` at ``now`` -> (publish ms, read by this user).

    Every live announcement: for the pinned sections and several-platform
    counts. A list page reads its own page only (``read_page``).
    """
    chunk, offset = user_slot(user_id)
    client = _client()
    now_ms = to_ms(now)
    for _ in range(_ATTEMPTS):
        index = _chunk_index(client, platform=platform, chunk=chunk)
        live = [pk for pk in index.times if index.live(pk, now_ms)]
        bits = _read_bits(client, platform=platform, chunk=chunk, offset=offset, index=index, ids=live)
        if bits is not None:
            return {pk: (index.times[pk][0], bit) for pk, bit in zip(live, bits, strict=True)}
    raise IndexUnsettled(f"announcement index of {platform}/{chunk} kept changing")


def read_page(
    *, platform: str, user_id: int, now: datetime, after: tuple[int, int] | None, limit: int
) -> list[tuple[int, int, bool]]:
    """Up to ``limit`` (publish ms, id, read) live on ``platform`` at ``now``, newest
    first, strictly below ``after`` (publish ms, id): one script call reading
    the bits of those announcements only, whatever the number live."""
    chunk, offset = user_slot(user_id)
    client = _client()
    now_ms = to_ms(now)
    for _ in range(_ATTEMPTS):
        index = _chunk_index(client, platform=platform, chunk=chunk)
        page = index.page(now_ms, after, limit)
        bits = _read_bits(
            client, platform=platform, chunk=chunk, offset=offset, index=index, ids=[pk for _, pk in page]
        )
        if bits is not None:
            return [(publish, pk, bit) for (publish, pk), bit in zip(page, bits, strict=True)]
    raise IndexUnsettled(f"announcement index of {platform}/{chunk} kept changing")


def read_flags(*, platform: str, user_id: int, ids: Sequence[int], now: datetime) -> dict[int, tuple[int, bool]]:
    """Of these announcements, those live on ``platform`` at ``now`` -> (publish ms, read)."""
    chunk, offset = user_slot(user_id)
    client = _client()
    now_ms = to_ms(now)
    for _ in range(_ATTEMPTS):
        index = _chunk_index(client, platform=platform, chunk=chunk)
        live = [int(pk) for pk in ids if index.live(int(pk), now_ms)]
        bits = _read_bits(client, platform=platform, chunk=chunk, offset=offset, index=index, ids=live)
        if bits is not None:
            return {pk: (index.times[pk][0], bit) for pk, bit in zip(live, bits, strict=True)}
    raise IndexUnsettled(f"announcement index of {platform}/{chunk} kept changing")


@dataclass(frozen=True)
class CountCall:
    """count.lua's first call for one user on one platform (see ``read_count``)."""

    platform: str
    chunk: int
    offset: int
    user_id: int
    index: ChunkIndex
    live: int  # announcements live at ``now_ms`` in ``index``
    now_ms: int
    keys: tuple[str, ...]

    def args(self, seen_t: str = "") -> list[Any]:
        return [self.index.token, _counter_of(self.offset)[1], self.now_ms, self.offset, seen_t]


def read_count_call(*, platform: str, user_id: int, now: datetime) -> CountCall:
    """Prepare a count (no Redis call when the process's index copy is warm)."""
    chunk, offset = user_slot(user_id)
    now_ms = to_ms(now)
    index = _chunk_index(_client(), platform=platform, chunk=chunk)
    return CountCall(
        platform=platform,
        chunk=chunk,
        offset=offset,
        user_id=int(user_id),
        index=index,
        live=index.live_count(now_ms),
        now_ms=now_ms,
        keys=(
            *_chunk_keys(platform, chunk),
            notice_keys.reads(platform, chunk, _counter_of(offset)[0]),
        ),
    )


def read_count_settle(call: CountCall, reply: Any) -> tuple[int, int]:
    """(live, read) from the first call's reply. When publish or expiry times
    passed since the chunk time, a second call adds what they change for this
    user (their bits only), and the chunk time moves on for every reader."""
    client = _client()
    refreshes = 0
    while True:
        if isinstance(reply, Exception):
            raise reply
        reply = int(reply)
        if reply >= 0:
            return call.live, reply
        refreshes += 1
        if refreshes > 2 * _ATTEMPTS:
            raise IndexUnsettled(f"announcement index of {call.platform}/{call.chunk} kept changing")
        seen = client.hget(notice_keys.meta(call.platform, call.chunk), "t") if reply == -2 else None
        if seen is None:
            if reply == -3 or reply == -2:
                # A chunk without a time (built before read counters): count it now.
                _build_chunk(client, platform=call.platform, chunk=call.chunk)
            ids_cache.pop((call.platform, call.chunk), None)
            call = read_count_call(platform=call.platform, user_id=call.user_id, now=from_ms(call.now_ms))
            reply = COUNT_SCRIPT(keys=call.keys, args=call.args(), client=client)
            continue
        seen_t = seen.decode()
        t = int(float(seen_t))
        changes = call.index.changes(t, call.now_ms)
        reply = COUNT_SCRIPT(
            keys=[*call.keys, *(notice_keys.bitmap(call.platform, call.chunk, pk) for pk in changes)],
            args=[*call.args(seen_t), *changes.values()],
            client=client,
        )
        if call.now_ms > t and int(reply) >= 0:
            _advance(client, call=call, seen_t=seen_t)


def _advance(client: RedisClient, *, call: CountCall, seen_t: str) -> None:
    """Move the chunk time on towards ``call.now_ms``, at most ``ADVANCE_BATCH``
    publish or expiry times per call: later counts in the chunk answer at once."""
    t = int(float(seen_t))
    moments = call.index.moments(t, call.now_ms)
    target = call.now_ms if len(moments) <= ADVANCE_BATCH else moments[ADVANCE_BATCH - 1]
    changes = call.index.changes(t, target)
    blocks = _block_keys(call.platform, call.chunk)
    _ADVANCE(
        keys=[
            notice_keys.meta(call.platform, call.chunk),
            *blocks,
            *(notice_keys.bitmap(call.platform, call.chunk, pk) for pk in changes),
        ],
        args=[call.index.token, seen_t, target, len(blocks), _block_users(), *changes.values()],
        client=client,
    )


def read_count(*, platform: str, user_id: int, now: datetime) -> tuple[int, int]:
    """(live announcements of ``platform`` at ``now``, how many of them the user read).

    Usually one short script call that reads the user's counter; see
    ``read_count_settle`` for the call after a publish or expiry time passed.
    """
    call = read_count_call(platform=platform, user_id=user_id, now=now)
    return read_count_settle(call, COUNT_SCRIPT(keys=call.keys, args=call.args()))


def mark(*, platforms: Iterable[str], user_id: int, announcement_id: int, read: bool) -> bool:
    """Set (or clear) the user's bit in each platform's bitmap, and the user's
    read counter with it; True if any bit changed."""
    chunk, offset = user_slot(user_id)
    block, counter = _counter_of(offset)
    client = _client()
    changed = False
    hour = to_ms(timezone.now()) // _HOUR_MS
    for platform in platforms:
        script_keys = [
            *_chunk_keys(platform, chunk),
            notice_keys.bitmap(platform, chunk, announcement_id),
            notice_keys.read_hours(platform, chunk, announcement_id),
            notice_keys.reads(platform, chunk, block),
        ]
        args = [int(announcement_id), offset, int(read), hour, _READ_HOURS_TTL_SECONDS, counter]
        for _ in range(_ATTEMPTS):
            previous = int(_MARK(keys=script_keys, args=args, client=client))
            if previous != -1:
                break
            _build_chunk(client, platform=platform, chunk=chunk)
        if previous in (0, 1) and bool(previous) != read:
            changed = True
    if changed:
        # The inbox counts include unread announcements: open pages refresh,
        # and the counts ETag moves on.
        inbox_changed(user_ids=[user_id], reason="announcement")
    return changed


def read_counts(*, announcement_id: int, platforms: Iterable[str]) -> dict[str, int]:
    """Users who read the announcement, per platform (BITCOUNT over every built chunk)."""
    client = _client()
    chunks = _built_chunks(client)
    wanted = list(platforms)
    pipe = client.pipeline(transaction=False)
    for platform in wanted:
        for chunk in chunks:
            key = notice_keys.bitmap(platform, chunk, announcement_id)
            pipe.bitcount(key)
            pipe.getrange(key, 0, 4)  # the head's bits are not readers
    replies = iter(pipe.execute())
    return {platform: sum(_readers_in(next(replies), next(replies)) for _ in chunks) for platform in wanted}


def _readers_in(bits: Any, start: bytes) -> int:
    window = _window_of(start)
    if window is None:
        return 0
    return int(bits) - sum(bin(b).count("1") for b in start[: window[1]])


def read_hours(*, announcement_id: int, platforms: Iterable[str]) -> dict[datetime, int]:
    """First reads per hour (all platforms and chunks added up), oldest first."""
    client = _client()
    pipe = client.pipeline(transaction=False)
    for platform in platforms:
        for chunk in _built_chunks(client):
            pipe.hgetall(notice_keys.read_hours(platform, chunk, announcement_id))
    return hours_from_hashes(pipe.execute())


def read_bits(*, platform: str, announcement_id: int, user_ids: Sequence[int]) -> list[bool]:
    """Whether each user read the announcement on ``platform``: one pipelined GET of
    each chunk's bitmap (a window of at most a chunk's bytes) the users sit in."""
    slots = [user_slot(user_id) for user_id in user_ids]
    chunks = sorted({chunk for chunk, _ in slots})
    if not chunks:
        return []
    pipe = _client().pipeline(transaction=False)
    for chunk in chunks:
        pipe.get(notice_keys.bitmap(platform, chunk, announcement_id))
    data = dict(zip(chunks, pipe.execute(), strict=True))
    return [_window_bit(data[chunk], offset) for chunk, offset in slots]


# --- Read bitmaps as a whole ------------------------------------------------------

ReadersMember = tuple[str, int]  # (platform, announcement id)


def _readers_of(members: Sequence[ReadersMember]) -> dict[ReadersMember, BitMap]:
    """Readers (user ids) of each (platform, announcement), all chunks together (one pipeline)."""
    client = _client()
    chunks = _built_chunks(client)
    size = _chunk_users()
    pipe = client.pipeline(transaction=False)
    for platform, pk in members:
        for chunk in chunks:
            pipe.get(notice_keys.bitmap(platform, chunk, pk))
    found = iter(pipe.execute())
    readers: dict[ReadersMember, BitMap] = {}
    for member in members:
        bits = BitMap()
        for chunk in chunks:
            bits |= window_from_redis(next(found), base=chunk * size)
        readers[member] = bits
    return readers


def readers(*, announcement_id: int, platforms: Iterable[str]) -> BitMap:
    """Every user who has read the announcement, all platforms and chunks together."""
    found = _readers_of([(platform, announcement_id) for platform in platforms])
    result = BitMap()
    for bits in found.values():
        result |= bits
    return result


def readers_restore(*, readers: Mapping[ReadersMember, BitMap]) -> int:
    """Write committed read bitmaps back, per chunk, only where the key is missing (SET NX):
    a restore while the site serves never undoes a newer mark, and the readers of a
    bitmap that counts in a built chunk have their counters moved with it
    (restore_bitmap.lua, one call per bitmap). Registers the chunks it wrote so
    counts and index builds include them. Returns keys written.
    """
    size = _chunk_users()
    client = _client()
    chunks: set[int] = set()
    written = 0
    for (platform, pk), users in readers.items():
        for chunk, part in bitmap_split(users, size=size).items():
            script_keys = [
                *_chunk_keys(platform, chunk),
                notice_keys.bitmap(platform, chunk, pk),
                *_block_keys(platform, chunk),
            ]
            args = [window_to_redis(part, base=chunk * size), int(pk), _block_users()]
            written += int(_RESTORE_BITMAP(keys=script_keys, args=args, client=client))
            chunks.add(chunk)
    if chunks:
        # A bitmap of an unregistered chunk would be invisible to read_counts
        # and left out of index builds; platform_sync builds every chunk here.
        _register_chunks(client, sorted(chunks))
    return written


# --- Drift checks ------------------------------------------------------------------
# (the Redis side of notices/drift.py: reads only; repairs run platform_sync)


def drift_platform_entries(*, platform: str) -> list[Entry]:
    """What every built chunk index of ``platform`` should hold: the rebuild's own query."""
    return _platform_entries(platform)


def drift_chunk_indexes(*, platform: str) -> dict[int, tuple[dict[int, int], dict[int, int]]]:
    """Per built chunk of ``platform``: (index id -> publish ms, expiry id -> expire ms), one pipeline."""
    client = _client()
    chunks = _built_chunks(client)
    pipe = client.pipeline(transaction=False)
    for chunk in chunks:
        pipe.zrange(notice_keys.index(platform, chunk), 0, -1, withscores=True)
        pipe.zrange(notice_keys.expiry(platform, chunk), 0, -1, withscores=True)
    replies = pipe.execute()
    return {
        chunk: (
            {int(m): int(s) for m, s in replies[2 * i]},
            {int(m): int(s) for m, s in replies[2 * i + 1]},
        )
        for i, chunk in enumerate(chunks)
    }


# --- end of drift checks -----------------------------------------------------------


def _restore_chunk(
    client: RedisClient, *, platform: str, chunk: int, entries: Sequence[Entry]
) -> tuple[int, list[bytes]]:
    """Restore a new chunk's bitmaps from PostgreSQL (where Redis has none),
    then count, per user, the entries live now that the user read: the chunk
    time and its counter blocks, for sync_chunk.lua's first build."""
    size = _chunk_users()
    readers = announcement_chunk_readers(
        platform=platform,
        announcement_ids=[pk for pk, _, _ in entries],
        first_user=chunk * size,
        end_user=(chunk + 1) * size,
    )
    if readers:
        pipe = client.pipeline(transaction=False)
        for pk, users in readers.items():
            pipe.set(notice_keys.bitmap(platform, chunk, pk), window_to_redis(users, base=chunk * size), nx=True)
        pipe.execute()
    t = to_ms(timezone.now())
    live = [pk for pk, publish_ms, expire_ms in entries if publish_ms <= t and (expire_ms is None or t < expire_ms)]
    counts = [0] * size
    if live:
        # Read back what Redis holds now (the restored bits, or bitmaps written
        # before the chunk was built): the counters must match those.
        pipe = client.pipeline(transaction=False)
        for pk in live:
            pipe.get(notice_keys.bitmap(platform, chunk, pk))
        for data in pipe.execute():
            for offset in window_from_redis(data):
                if offset < size:
                    counts[offset] += 1
    block = _block_users()
    # Each block as long and as wide as its counters need (b"": none).
    blocks = [_pack_block(counts[start : start + block]) for start in range(0, size, block)]
    return t, blocks
