"""Restoring the committed inbox read state into Redis (messagecenter/services/read_state.py).

PostgreSQL holds every user's read bit-sets and watermark; after a Redis loss
the rebuild writes them back here, only where Redis has no key.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyroaring import BitMap

from core.lua import LuaScript
from core.redis import is_cluster
from messagecenter import keys as mc_keys
from messagecenter.readmodel import bits
from messagecenter.readmodel.entries import CATEGORY_ORDER

RESTORE_SCRIPT = LuaScript(__file__, "../lua/restore.lua", preambles=("../lua/_bits.lua",))


@dataclass
class UserReadState:
    """One user's committed read state: month -> (read, ever-read) offsets, and the watermark."""

    months: dict[int, tuple[BitMap, BitMap]] = field(default_factory=dict)
    seen_ms: int | None = None


def _restore_call(user_id: int, state: UserReadState) -> tuple[list[str], list[bytes | str | int]]:
    """restore.lua's KEYS and ARGV for one user's read state."""
    months = sorted(state.months)
    script_keys = [mc_keys.inbox(user_id), mc_keys.inbox_counters(user_id), mc_keys.inbox_state(user_id)]
    script_keys.extend(mc_keys.read_bitmap(user_id, m) for m in months)
    script_keys.extend(mc_keys.read_ever_bitmap(user_id, m) for m in months)
    # Each bit-set in its compact form (bits.encode: a set while sparse).
    read = [bits.encode(state.months[m][0]) for m in months]
    ever = [bits.encode(state.months[m][1]) for m in months]
    # The unread zsets last (restore.lua takes them from the end), their categories last in ARGV.
    script_keys.extend([mc_keys.inbox_unread(user_id), *(mc_keys.inbox_unread(user_id, c) for c in CATEGORY_ORDER)])
    args: list[bytes | str | int] = [len(months), *months]
    args.extend(data for _form, data in read)
    args.extend(data for _form, data in ever)
    args.append("" if state.seen_ms is None else state.seen_ms)
    args.extend(form for form, _data in (*read, *ever))
    args.extend(CATEGORY_ORDER)
    return script_keys, args


def read_state_restore(*, users: Mapping[int, UserReadState]) -> int:
    """Write the read state back where Redis has no key (restore.lua, one call per user,
    pipelined on a single Redis); returns how many keys/fields were written."""
    calls = [_restore_call(user_id, state) for user_id, state in users.items()]
    if not calls:
        return 0
    if is_cluster():
        # redis-py's ClusterPipeline refuses EVALSHA: one call per user (per slot).
        return sum(int(RESTORE_SCRIPT(script_keys, args)) for script_keys, args in calls)
    # One connection, no SCRIPT EXISTS first; calls refused with NOSCRIPT run again, in order.
    return sum(int(reply) for reply in RESTORE_SCRIPT.stream(calls))
