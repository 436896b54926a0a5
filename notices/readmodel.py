"""The announcements' Redis read model; the only notices module that talks to Redis.

Layout (names in ``core.keys``), per platform ``p`` and user-id chunk ``c``
(``MESSAGECENTER_BITMAP_CHUNK_USERS`` ids per chunk), all under the hash tag
``{p}`` (chunk 0) or ``{p:c}``:

- ``notice:{p}:<id>``   bitmap, bit = user id within the chunk, 1 = read;
- ``notice:{p}:index``  zset of the platform's not-yet-expired announcement ids,
  score = publish time in ms (scheduled ones included: time filters at read);
- ``notice:{p}:expire`` zset, score = expiry time in ms (absent: never);
- ``notice:{p}:meta``   hash ``rev`` / ``token`` of the index build.

Publishing writes the index of each built chunk (a handful), never per user.
Counting is one script per platform over its chunk's keys, all passed in
``KEYS``: the caller keeps the chunk's id list in process under the meta
token, and the script answers ``-1`` when the token moved (refresh, retry).
Indexes are snapshots of PostgreSQL: rebuilt after every committed change and,
when missing (new chunk, flushed Redis), on first read.
"""

import logging
import math
import uuid
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone
from pyroaring import BitMap
from redis.exceptions import RedisError

from core import keys
from core.bitmaps import bitmap_from_redis, bitmap_split, bitmap_to_redis
from core.exceptions import LimitExceeded
from core.insight import HOUR_MS, READ_HOURS_TTL_SECONDS, hours_from_hashes
from core.live import inbox_changed
from core.lua import LuaScript
from core.redis import RedisClient, get_redis, is_cluster
from notices.models import Announcement
from notices.snapshot_rows import announcement_chunk_readers

_READ_STATE = LuaScript(__file__, "lua/read_state.lua")
_SNAPSHOT = LuaScript(__file__, "lua/snapshot.lua")
_SYNC_CHUNK = LuaScript(__file__, "lua/sync_chunk.lua")
# Adding one announcement: the revision first, then each built chunk.
_ADD_REVISION = LuaScript(__file__, "lua/add_revision.lua")
_ADD_CHUNK = LuaScript(__file__, "lua/add_chunk.lua")
_MARK = LuaScript(__file__, "lua/mark.lua")
COUNT_SCRIPT = LuaScript(__file__, "lua/count.lua")

logger = logging.getLogger(__name__)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ATTEMPTS = 4
_HOUR_MS = HOUR_MS
# Per-hour read counters outlive any announcement worth charting; the
# lifetime, renewed on every read, frees them after a delete without a sweep.
_READ_HOURS_TTL_SECONDS = READ_HOURS_TTL_SECONDS

# (platform, chunk) -> (token, ids): the ids whose bitmaps go into KEYS. Safe
# to share between threads: entries are replaced whole, and a stale entry is
# caught by the token check inside the script.
_ids_cache: dict[tuple[str, int], "ChunkIndex"] = {}

Entry = tuple[int, int, int | None]  # (announcement id, publish ms, expire ms or None)


class IndexUnsettled(RedisError):
    """The index kept changing under the reader; callers treat it like Redis being down."""


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
    return divmod(user_id, int(settings.MESSAGECENTER_BITMAP_CHUNK_USERS))


def user_id_of(user: Any) -> int:
    """The integer id a user's bits live at (callers pass authenticated users)."""
    if user.pk is None:
        raise LimitExceeded("Anonymous users have no read state.")
    return int(user.pk)


def clear_local_cache() -> None:
    _ids_cache.clear()
    _live_windows.clear()
    _revisions.clear()


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
    return [keys.notice_meta(platform, chunk), keys.notice_index(platform, chunk), keys.notice_expiry(platform, chunk)]


def _write_chunk(
    client: RedisClient, *, platform: str, chunk: int, rev: int, entries: Sequence[Entry], drop_ids: Iterable[int]
) -> None:
    args: list[Any] = [rev, uuid.uuid4().hex, "1", len(entries)]
    for pk, publish_ms, expire_ms in entries:
        args.extend((pk, publish_ms, "" if expire_ms is None else expire_ms))
    script_keys = [*_chunk_keys(platform, chunk), *(keys.notice_bitmap(platform, chunk, pk) for pk in drop_ids)]
    # One round trip when the chunk is built (every publish after the first):
    # the script checks the meta itself and refuses, changing nothing, if not.
    if _SYNC_CHUNK(keys=script_keys, args=args, client=client) == -1:
        # First build of the chunk (a new id range, or Redis lost its data):
        # mark.lua refuses until the meta exists, so no mark can be in these
        # bitmaps yet and the snapshots go back in whole before the index opens.
        _restore_chunk(client, platform=platform, chunk=chunk, announcement_ids=[pk for pk, _, _ in entries])
        args[2] = "0"
        _SYNC_CHUNK(keys=script_keys, args=args, client=client)
    _ids_cache.pop((platform, chunk), None)


def _built_chunks(client: RedisClient) -> list[int]:
    # Chunk 0 always: it holds most users, and its keys keep the plain
    # ``notice:<platform>:<id>`` shape current.
    return sorted({0} | {int(c) for c in client.smembers(keys.notice_chunks())})


def platform_sync(*, platform: str, drop_ids: Iterable[int] = ()) -> None:
    """Rebuild every built chunk index of ``platform`` from PostgreSQL, dropping the
    bitmaps of ``drop_ids`` (announcements deleted or taken off the platform).

    Called after commit. The revision is taken before PostgreSQL is read: of two
    racing rebuilds the later revision saw every commit, and the script keeps it.
    """
    client = get_redis()
    # One round trip; the chunk list is read after the revision is taken, so a
    # chunk registered later (_build_chunk) reads this revision or a newer one.
    pipe = client.pipeline(transaction=False)
    pipe.incr(keys.notice_revision(platform))
    pipe.sadd(keys.notice_chunks(), 0)
    pipe.smembers(keys.notice_chunks())
    rev_raw, _, chunks_raw = pipe.execute()
    rev = int(rev_raw)
    _revisions[platform] = rev
    entries = _platform_entries(platform)
    drops = list(drop_ids)
    for chunk in sorted({0} | {int(c) for c in chunks_raw}):
        _write_chunk(client, platform=platform, chunk=chunk, rev=rev, entries=entries, drop_ids=drops)


# platform -> the last revision this process took (platform_sync, platform_add):
# the fence of the next incremental add (see platform_add). Read before the
# publish commits (platform_revision_seen), so whatever it holds was taken
# before that commit; another process's revision since then only costs that
# add its fast path.
_revisions: dict[str, int] = {}


def platform_revision_seen(*, platform: str) -> int | None:
    """The last revision of ``platform`` this process took, or None (no Redis call)."""
    return _revisions.get(platform)


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
    chunk set), then one call per built chunk; on Redis Cluster one more for
    the chunk set. Returns True when it added without a rebuild.
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
    client = get_redis()
    pk, publish_ms, expire_ms = entry
    rev_call = (keys.notice_revision(platform),), (seen,)
    if is_cluster():
        rev = int(_ADD_REVISION(keys=rev_call[0], args=rev_call[1], client=client))
        chunks_raw = client.smembers(keys.notice_chunks()) if rev != -1 else set()
    else:
        # One round trip: on a single Redis the pipeline runs in order, so the
        # chunk set is read after the revision moved on.
        pipe = client.pipeline(transaction=False)
        _ADD_REVISION.queue(pipe, rev_call[0], rev_call[1])
        pipe.smembers(keys.notice_chunks())
        rev_reply, chunks_raw = pipe.execute(raise_on_error=False)
        rev = int(_ADD_REVISION.settle(rev_reply, rev_call[0], rev_call[1], client=client))
        if isinstance(rev_reply, Exception) and rev != -1:
            # Refused unknown (a flushed script cache) and run again since: the
            # chunk set above was read before the revision moved.
            chunks_raw = client.smembers(keys.notice_chunks())
    if rev == -1:
        return False
    # A chunk registered after the revision moved (_build_chunk) reads that
    # revision or a newer one, and PostgreSQL after our commit: it holds the row.
    chunks = sorted({0} | {int(c) for c in chunks_raw})
    token = uuid.uuid4().hex
    added = True
    for chunk in chunks:
        args = [
            seen,
            f"{token}:{chunk}",
            int(pk),
            int(publish_ms),
            "" if expire_ms is None else int(expire_ms),
        ]
        added = (
            bool(int(_ADD_CHUNK(keys=_chunk_keys(platform, chunk), args=[*args, now_ms, rev], client=client))) and added
        )
        _ids_cache.pop((platform, chunk), None)
    if added:
        _revisions[platform] = rev
    return added


def _build_chunk(client: RedisClient, *, platform: str, chunk: int) -> None:
    """Build a chunk that has no index yet (first user of a new id range, flushed Redis).

    Registered first, so a concurrent platform_sync either sees the chunk or ran
    its revision before ours, in which case our snapshot holds its commit.
    """
    client.sadd(keys.notice_chunks(), chunk)
    rev = int(client.get(keys.notice_revision(platform)) or 0)
    _write_chunk(client, platform=platform, chunk=chunk, rev=rev, entries=_platform_entries(platform), drop_ids=())


@dataclass(frozen=True)
class ChunkIndex:
    """A process-local copy of one (platform, chunk) index, valid under ``token``.

    Bitmap key names are built once per copy, not once per read.
    """

    token: str
    entries: tuple[Entry, ...]
    bitmap_keys: tuple[str, ...]


def _chunk_index(client: RedisClient, *, platform: str, chunk: int) -> ChunkIndex:
    cached = _ids_cache.get((platform, chunk))
    if cached is not None:
        return cached
    for _ in range(_ATTEMPTS):
        snapshot = _SNAPSHOT(keys=_chunk_keys(platform, chunk), client=client)
        if snapshot:
            entries = tuple(
                (int(snapshot[i]), int(float(snapshot[i + 1])), int(snapshot[i + 2]) if snapshot[i + 2] else None)
                for i in range(1, len(snapshot), 3)
            )
            index = ChunkIndex(
                token=snapshot[0].decode(),
                entries=entries,
                bitmap_keys=tuple(keys.notice_bitmap(platform, chunk, pk) for pk, _, _ in entries),
            )
            _ids_cache[(platform, chunk)] = index
            return index
        _build_chunk(client, platform=platform, chunk=chunk)
    raise IndexUnsettled(f"announcement index of {platform}/{chunk} could not be built")


def read_state(*, platform: str, user_id: int, now: datetime) -> dict[int, tuple[int, bool]]:
    """Live announcements of ``platform`` at ``now`` -> (publish ms, read by this user).

    One script call when the process's copy of the index is current: the copy
    says which announcements are live at ``now`` (publish and expiry times are
    part of it, and the token proves it current), the script reads their bits.
    """
    chunk, offset = user_slot(user_id)
    client = get_redis()
    now_ms = to_ms(now)
    for _ in range(_ATTEMPTS):
        index = _chunk_index(client, platform=platform, chunk=chunk)
        live = [
            i
            for i, (_, publish_ms, expire_ms) in enumerate(index.entries)
            if publish_ms <= now_ms and (expire_ms is None or expire_ms > now_ms)
        ]
        reply = _READ_STATE(
            keys=[keys.notice_meta(platform, chunk), *(index.bitmap_keys[i] for i in live)],
            args=[index.token, offset],
            client=client,
        )
        if reply == -1:
            _ids_cache.pop((platform, chunk), None)
            continue
        bits = reply.decode() if isinstance(reply, bytes) else str(reply)
        return {index.entries[i][0]: (index.entries[i][1], bit == "1") for i, bit in zip(live, bits, strict=True)}
    raise IndexUnsettled(f"announcement index of {platform}/{chunk} kept changing")


# How long a user's cached announcement count lives (count.lua): only users
# reading their counts now hold one.
COUNT_CACHE_SECONDS = 600


@dataclass(frozen=True)
class LiveWindow:
    """Which entries of an index copy are live, and the times between which that holds."""

    token: str
    start: int  # ms, inclusive (-1: since ever)
    end: int | None  # ms, exclusive (None: for ever)
    live: tuple[int, ...]  # positions in ``ChunkIndex.entries``
    digest: str


# (platform, chunk) -> the live window of the process's index copy: the live
# set only changes when a publish or expiry time passes, so it is worked out
# once per window, not once per count.
_live_windows: dict[tuple[str, int], LiveWindow] = {}


def _live_window(platform: str, chunk: int, index: ChunkIndex, now_ms: int) -> LiveWindow:
    window = _live_windows.get((platform, chunk))
    if (
        window is not None
        and window.token == index.token
        and window.start <= now_ms
        and (window.end is None or now_ms < window.end)
    ):
        return window
    live: list[int] = []
    start, end = -1, None
    for i, (_, publish_ms, expire_ms) in enumerate(index.entries):
        for moment in (publish_ms, expire_ms):
            if moment is None:
                continue
            if moment <= now_ms:
                start = max(start, moment)
            elif end is None or moment < end:
                end = moment
        if publish_ms <= now_ms and (expire_ms is None or expire_ms > now_ms):
            live.append(i)
    ids = ",".join(str(index.entries[i][0]) for i in live)
    digest = format(zlib.crc32(ids.encode()), "08x") + format(len(live), "x")
    window = LiveWindow(token=index.token, start=start, end=end, live=tuple(live), digest=digest)
    _live_windows[(platform, chunk)] = window
    return window


@dataclass(frozen=True)
class CountCall:
    """count.lua's cheap first call for one user on one platform (see ``read_count``)."""

    platform: str
    chunk: int
    offset: int
    index: ChunkIndex
    live: tuple[int, ...]  # positions in ``index.entries`` live at ``now_ms``
    now_ms: int
    digest: str
    keys: tuple[str, ...]
    until_ms: float  # when the live set changes next (a publish or expiry time); inf: never

    def args(self) -> list[Any]:
        return [self.index.token, self.offset, self.digest, COUNT_CACHE_SECONDS]


def read_count_call(*, platform: str, user_id: int, now: datetime) -> CountCall:
    """Prepare a cached count (no Redis call when the process's index copy is warm)."""
    chunk, offset = user_slot(user_id)
    now_ms = to_ms(now)
    index = _chunk_index(get_redis(), platform=platform, chunk=chunk)
    window = _live_window(platform, chunk, index, now_ms)
    return CountCall(
        platform=platform,
        chunk=chunk,
        offset=offset,
        index=index,
        live=window.live,
        now_ms=now_ms,
        digest=window.digest,
        keys=(
            keys.notice_meta(platform, chunk),
            keys.notice_reads_epoch(platform, chunk),
            keys.notice_user_count(platform, chunk, user_id),
        ),
        until_ms=math.inf if window.end is None else window.end,
    )


def read_count_settle(call: CountCall, reply: Any) -> tuple[int, int]:
    """(live, read) from the first call's reply; computes and caches the count
    (the bitmaps of the live announcements passed) when nothing current was cached."""
    client = get_redis()
    refreshes = 0
    while True:
        if isinstance(reply, Exception):
            raise reply
        reply = int(reply)
        if reply >= 0:
            return len(call.live), reply
        if reply == -1:  # the index was rebuilt: take a fresh copy
            refreshes += 1
            if refreshes >= _ATTEMPTS:
                raise IndexUnsettled(f"announcement index of {call.platform}/{call.chunk} kept changing")
            _ids_cache.pop((call.platform, call.chunk), None)
            call = read_count_call(platform=call.platform, user_id=_user_of(call), now=from_ms(call.now_ms))
            reply = COUNT_SCRIPT(keys=call.keys, args=call.args(), client=client)
        elif not call.live:
            return 0, 0
        else:  # -2: nothing current cached; count over the live bitmaps (and cache it)
            bitmaps = [call.index.bitmap_keys[i] for i in call.live]
            reply = COUNT_SCRIPT(keys=[*call.keys, *bitmaps], args=call.args(), client=client)


def _user_of(call: CountCall) -> int:
    return call.chunk * int(settings.MESSAGECENTER_BITMAP_CHUNK_USERS) + call.offset


def read_count(*, platform: str, user_id: int, now: datetime) -> tuple[int, int]:
    """(live announcements of ``platform`` at ``now``, how many of them the user read).

    Usually one short script call: the user's count is cached in Redis under
    the index token; when it is missing or stale the live bitmaps are read
    (one more call) and the count cached again.
    """
    call = read_count_call(platform=platform, user_id=user_id, now=now)
    return read_count_settle(call, COUNT_SCRIPT(keys=call.keys, args=call.args()))


def mark(*, platforms: Iterable[str], user_id: int, announcement_id: int, read: bool) -> bool:
    """Set (or clear) the user's bit in each platform's bitmap; True if any bit changed."""
    chunk, offset = user_slot(user_id)
    client = get_redis()
    changed = False
    dirty: list[str] = []
    hour = to_ms(timezone.now()) // _HOUR_MS
    for platform in platforms:
        script_keys = [
            *_chunk_keys(platform, chunk)[:2],
            keys.notice_bitmap(platform, chunk, announcement_id),
            keys.notice_read_hours(platform, chunk, announcement_id),
            keys.notice_user_count(platform, chunk, user_id),
        ]
        args = [int(announcement_id), offset, int(read), hour, _READ_HOURS_TTL_SECONDS]
        for _ in range(_ATTEMPTS):
            previous = int(_MARK(keys=script_keys, args=args, client=client))
            if previous != -1:
                break
            _build_chunk(client, platform=platform, chunk=chunk)
        if previous in (0, 1) and bool(previous) != read:
            changed = True
            dirty.append(_dirty_member(platform, announcement_id))
    if dirty:
        _snapshot_dirty_add(client, dirty)
    if changed:
        # The inbox counts include unread announcements: open pages refresh,
        # and the counts ETag moves on.
        inbox_changed(user_ids=[user_id], reason="announcement")
    return changed


def read_counts(*, announcement_id: int, platforms: Iterable[str]) -> dict[str, int]:
    """Users who read the announcement, per platform (BITCOUNT over every built chunk)."""
    client = get_redis()
    chunks = _built_chunks(client)
    wanted = list(platforms)
    pipe = client.pipeline(transaction=False)
    for platform in wanted:
        for chunk in chunks:
            pipe.bitcount(keys.notice_bitmap(platform, chunk, announcement_id))
    replies = iter(pipe.execute())
    return {platform: sum(int(next(replies)) for _ in chunks) for platform in wanted}


def read_hours(*, announcement_id: int, platforms: Iterable[str]) -> dict[datetime, int]:
    """First reads per hour (all platforms and chunks added up), oldest first."""
    client = get_redis()
    pipe = client.pipeline(transaction=False)
    for platform in platforms:
        for chunk in _built_chunks(client):
            pipe.hgetall(keys.notice_read_hours(platform, chunk, announcement_id))
    return hours_from_hashes(pipe.execute())


def read_bits(*, platform: str, announcement_id: int, user_ids: Sequence[int]) -> list[bool]:
    """Whether each user read the announcement on ``platform``: one pipelined GETBIT batch."""
    pipe = get_redis().pipeline(transaction=False)
    for user_id in user_ids:
        chunk, offset = user_slot(user_id)
        pipe.getbit(keys.notice_bitmap(platform, chunk, announcement_id), offset)
    return [bool(bit) for bit in pipe.execute()] if user_ids else []


# --- Durable read-state snapshots ----------------------------------------------------
# (the Redis side of notices/snapshots.py)
#
# Every changed bit of ``mark`` adds ``<platform>:<announcement id>`` to the
# global dirty set, one SADD after the per-chunk scripts (the set lives in
# another cluster slot, so never inside a script). The snapshot job SPOPs a
# batch, reads each announcement's bitmaps of every built chunk in one
# pipeline and hands PostgreSQL one BitMap of user ids per (platform,
# announcement). A mark landing after the SPOP adds the member again, so the
# next run copies it: nothing changed is ever left out, at worst copied twice.

SnapshotMember = tuple[str, int]  # (platform, announcement id)


def _dirty_member(platform: str, announcement_id: int) -> str:
    return f"{platform}:{int(announcement_id)}"


def _snapshot_dirty_add(client: RedisClient, members: Sequence[str]) -> None:
    # The mark itself has happened: a failure here costs at most this mark's
    # durability (one snapshot interval's worth), never the user's request.
    try:
        client.sadd(keys.notice_snapshot_dirty(), *members)
    except RedisError:
        logger.warning("read-state snapshot not told about %d change(s)", len(members), exc_info=True)


def snapshot_dirty_count() -> int:
    """How many (platform, announcement) read bitmaps wait for the snapshot job."""
    return int(get_redis().scard(keys.notice_snapshot_dirty()))


def snapshot_dirty_pop(*, count: int) -> list[SnapshotMember]:
    """Take up to ``count`` changed (platform, announcement) pairs off the dirty set."""
    raw = get_redis().spop(keys.notice_snapshot_dirty(), int(count)) or []
    members: list[SnapshotMember] = []
    for item in raw:
        platform, _, pk = item.decode().rpartition(":")
        if platform and pk.isdigit():
            members.append((platform, int(pk)))
    return members


def snapshot_dirty_return(*, members: Iterable[SnapshotMember]) -> None:
    """Put members back (PostgreSQL refused the batch): the next run copies them."""
    values = [_dirty_member(platform, pk) for platform, pk in members]
    if values:
        get_redis().sadd(keys.notice_snapshot_dirty(), *values)


def snapshot_restored() -> bool:
    """Whether this Redis holds the restored read state (the marker survives until a flush)."""
    return bool(get_redis().exists(keys.notice_snapshot_restored()))


def snapshot_restored_set() -> None:
    get_redis().set(keys.notice_snapshot_restored(), to_ms(timezone.now()))


def snapshot_readers(*, members: Sequence[SnapshotMember]) -> tuple[dict[SnapshotMember, BitMap], bool]:
    """Readers (user ids) of each (platform, announcement), all chunks together, and
    whether the restored marker was still there after the bitmaps were read.

    The marker is read last in the same pipeline: a flush between the reads
    would take it along, so ``True`` proves every bitmap came from a Redis that
    still held its restored state (not the near-empty one of a fresh start).
    """
    client = get_redis()
    chunks = _built_chunks(client)
    size = int(settings.MESSAGECENTER_BITMAP_CHUNK_USERS)
    pipe = client.pipeline(transaction=False)
    for platform, pk in members:
        for chunk in chunks:
            pipe.get(keys.notice_bitmap(platform, chunk, pk))
    pipe.exists(keys.notice_snapshot_restored())
    replies = pipe.execute()
    intact = bool(replies.pop())
    found = iter(replies)
    readers: dict[SnapshotMember, BitMap] = {}
    for member in members:
        bits = BitMap()
        for chunk in chunks:
            bits |= bitmap_from_redis(next(found), base=chunk * size)
        readers[member] = bits
    return readers, intact


def readers(*, announcement_id: int, platforms: Iterable[str]) -> BitMap:
    """Every user who has read the announcement, all platforms and chunks together."""
    found, _intact = snapshot_readers(members=[(platform, announcement_id) for platform in platforms])
    result = BitMap()
    for bits in found.values():
        result |= bits
    return result


def snapshot_restore(*, readers: Mapping[SnapshotMember, BitMap]) -> int:
    """Write snapshot bitmaps back, per chunk, only where the key is missing (SET NX):
    a restore while the site serves never undoes a newer mark. Registers the
    chunks it wrote so counts and index builds include them. Returns keys written.
    """
    size = int(settings.MESSAGECENTER_BITMAP_CHUNK_USERS)
    client = get_redis()
    pipe = client.pipeline(transaction=False)
    chunks: set[int] = set()
    epochs: set[tuple[str, int]] = set()
    for (platform, pk), users in readers.items():
        for chunk, part in bitmap_split(users, size=size).items():
            pipe.set(keys.notice_bitmap(platform, chunk, pk), bitmap_to_redis(part, base=chunk * size), nx=True)
            chunks.add(chunk)
            epochs.add((platform, chunk))
    # Bits that change without a mark: the users' cached counts (count.lua) go stale.
    for platform, chunk in sorted(epochs):
        pipe.incr(keys.notice_reads_epoch(platform, chunk))
    written = sum(1 for reply in pipe.execute()[: -len(epochs) or None] if reply) if chunks else 0
    if chunks:
        # A bitmap of an unregistered chunk would be invisible to read_counts
        # and left out of index builds; platform_sync builds every chunk here.
        client.sadd(keys.notice_chunks(), *sorted(chunks))
    return written


# --- Drift checks ------------------------------------------------------------------
# (the Redis side of notices/drift.py: reads only; repairs run platform_sync)


def drift_platform_entries(*, platform: str) -> list[Entry]:
    """What every built chunk index of ``platform`` should hold: the rebuild's own query."""
    return _platform_entries(platform)


def drift_chunk_indexes(*, platform: str) -> dict[int, tuple[dict[int, int], dict[int, int]]]:
    """Per built chunk of ``platform``: (index id -> publish ms, expiry id -> expire ms), one pipeline."""
    client = get_redis()
    chunks = _built_chunks(client)
    pipe = client.pipeline(transaction=False)
    for chunk in chunks:
        pipe.zrange(keys.notice_index(platform, chunk), 0, -1, withscores=True)
        pipe.zrange(keys.notice_expiry(platform, chunk), 0, -1, withscores=True)
    replies = pipe.execute()
    return {
        chunk: (
            {int(m): int(s) for m, s in replies[2 * i]},
            {int(m): int(s) for m, s in replies[2 * i + 1]},
        )
        for i, chunk in enumerate(chunks)
    }


# --- end of drift checks -----------------------------------------------------------


def _restore_chunk(client: RedisClient, *, platform: str, chunk: int, announcement_ids: Sequence[int]) -> None:
    size = int(settings.MESSAGECENTER_BITMAP_CHUNK_USERS)
    readers = announcement_chunk_readers(
        platform=platform, announcement_ids=announcement_ids, first_user=chunk * size, end_user=(chunk + 1) * size
    )
    if readers:
        pipe = client.pipeline(transaction=False)
        for pk, users in readers.items():
            pipe.set(keys.notice_bitmap(platform, chunk, pk), bitmap_to_redis(users, base=chunk * size), nx=True)
        pipe.execute()
