"""The Redis side of the inbox read-state snapshots (messagecenter/services/snapshots.py).

Every write of read state notes what changed in the global dirty set
(``keys.mc_snapshot_dirty``): ``<user id>:<yyyymm>`` for the month's read and
ever-read bitmaps, ``<user id>:seen`` for the unseen watermark. The set lives
in another cluster slot than the user's keys, so the note is added after the
per-user script (in the pipeline that already follows it, see
``reads.record_reads``), never inside it. The snapshot job SPOPs a batch and
reads the bitmaps in one pipeline; a change landing after the SPOP adds its
member again, so the next run copies it.
"""

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from django.utils import timezone
from pyroaring import BitMap
from redis.exceptions import RedisError

from core import keys
from core.lua import LuaScript
from core.redis import get_redis, is_cluster
from messagecenter.readmodel import bits
from messagecenter.readmodel.entries import CATEGORY_ORDER, to_ms

logger = logging.getLogger(__name__)

RESTORE_SCRIPT = LuaScript(__file__, "../lua/restore.lua", preambles=("../lua/_bits.lua",))

SEEN = "seen"

# (user id, yyyymm) or (user id, None) for the seen watermark.
DirtyMember = tuple[int, int | None]


def dirty_members(*, user_id: int, months: Iterable[int | str] = (), seen: bool = False) -> list[str]:
    """Dirty-set members for a user's changed months (and watermark)."""
    members = [f"{int(user_id)}:{int(month)}" for month in months]
    if seen:
        members.append(f"{int(user_id)}:{SEEN}")
    return members


def record_seen(*, user_id: int) -> None:
    """Note a moved watermark (one SADD; a failure loses durability, never the request)."""
    try:
        get_redis().sadd(keys.mc_snapshot_dirty(), *dirty_members(user_id=user_id, seen=True))
    except RedisError:
        logger.warning("read-state snapshot not told about user %s's watermark", user_id, exc_info=True)


def _parse(raw: bytes) -> DirtyMember | None:
    user, _, part = raw.decode().partition(":")
    if not user.isdigit():
        return None
    if part == SEEN:
        return int(user), None
    if part.isdigit():
        return int(user), int(part)
    return None


def snapshot_dirty_count() -> int:
    return int(get_redis().scard(keys.mc_snapshot_dirty()))


def snapshot_dirty_pop(*, count: int) -> list[DirtyMember]:
    """Take up to ``count`` changed members off the dirty set."""
    raw = get_redis().spop(keys.mc_snapshot_dirty(), int(count)) or []
    return [member for member in map(_parse, raw) if member is not None]


def snapshot_dirty_return(*, members: Iterable[DirtyMember]) -> None:
    """Put members back (PostgreSQL refused the batch): the next run copies them."""
    values = [f"{user}:{SEEN if month is None else month}" for user, month in members]
    if values:
        get_redis().sadd(keys.mc_snapshot_dirty(), *values)


def snapshot_restored() -> bool:
    """Whether this Redis holds the restored inbox read state (the marker dies with a flush)."""
    return bool(get_redis().exists(keys.mc_snapshot_restored()))


def snapshot_restored_set() -> None:
    get_redis().set(keys.mc_snapshot_restored(), to_ms(timezone.now()))


@dataclass
class ReadState:
    """What Redis holds for a batch of dirty members; None = the key (or field) is missing."""

    months: dict[tuple[int, int], tuple[BitMap | None, BitMap | None]] = field(default_factory=dict)
    seen: dict[int, int | None] = field(default_factory=dict)
    intact: bool = True


def snapshot_read(*, members: Sequence[DirtyMember]) -> ReadState:
    """Read bitmaps (read, ever-read) and watermarks of the members in one pipeline.

    The restored marker is read last: a flush between the reads takes it
    along, so ``intact`` proves the values came from a Redis that still held
    its restored state (not the near-empty one of a fresh start).
    """
    pipe = get_redis().pipeline(transaction=False)
    for user, month in members:
        if month is None:
            pipe.hget(keys.mc_inbox_state(user), SEEN)
        else:
            bits.queue(pipe, keys.mc_read_bitmap(user, month))
            bits.queue(pipe, keys.mc_read_ever_bitmap(user, month))
    pipe.exists(keys.mc_snapshot_restored())
    replies = bits.execute(pipe)
    state = ReadState(intact=bool(replies.pop()))
    found = iter(replies)
    for user, month in members:
        if month is None:
            raw = next(found)
            state.seen[user] = int(raw) if raw is not None else None
        else:
            read, ever = bits.take(found), bits.take(found)
            state.months[(user, month)] = (
                read.to_bitmap() if read.exists else None,
                ever.to_bitmap() if ever.exists else None,
            )
    return state


@dataclass
class UserSnapshot:
    """One user's durable read state: month -> (read, ever-read) offsets, and the watermark."""

    months: dict[int, tuple[BitMap, BitMap]] = field(default_factory=dict)
    seen_ms: int | None = None


def snapshot_restore(*, users: Mapping[int, UserSnapshot]) -> int:
    """Write the snapshots back where Redis has no key (restore.lua, one call per user,
    pipelined on a single Redis); returns how many keys/fields were written."""
    calls: list[tuple[list[str], list[bytes | str | int]]] = []
    for user_id, snapshot in users.items():
        months = sorted(snapshot.months)
        script_keys = [keys.mc_inbox(user_id), keys.mc_inbox_counters(user_id), keys.mc_inbox_state(user_id)]
        script_keys.extend(keys.mc_read_bitmap(user_id, m) for m in months)
        script_keys.extend(keys.mc_read_ever_bitmap(user_id, m) for m in months)
        # Each bit-set in its compact form (bits.encode: a set while sparse).
        read = [bits.encode(snapshot.months[m][0]) for m in months]
        ever = [bits.encode(snapshot.months[m][1]) for m in months]
        # The unread zsets last (restore.lua takes them from the end), their categories last in ARGV.
        script_keys.extend([keys.mc_inbox_unread(user_id), *(keys.mc_inbox_unread(user_id, c) for c in CATEGORY_ORDER)])
        args: list[bytes | str | int] = [len(months), *months]
        args.extend(data for _form, data in read)
        args.extend(data for _form, data in ever)
        args.append("" if snapshot.seen_ms is None else snapshot.seen_ms)
        args.extend(form for form, _data in (*read, *ever))
        args.extend(CATEGORY_ORDER)
        calls.append((script_keys, args))
    if not calls:
        return 0
    if is_cluster():
        # redis-py's ClusterPipeline refuses EVALSHA: one call per user (per slot).
        return sum(int(RESTORE_SCRIPT(script_keys, args)) for script_keys, args in calls)
    pipe = get_redis().pipeline(transaction=False)
    for script_keys, args in calls:
        RESTORE_SCRIPT(script_keys, args, client=pipe)
    return sum(int(reply) for reply in pipe.execute())
