"""One user's inbox scripts (messagecenter/lua/, each run with the shared
preambles ``_bits.lua``, ``_bits_many.lua``, ``_item.lua``, ``_state.lua``, ``_batch.lua``,
``_arrivals.lua``, ``_steps.lua``, ``_settle.lua``, ``_merge.lua`` and
``_inbox.lua`` first) and the typed calls that build their KEYS and ARGV, so
no caller counts positions.

Every script names the same inbox (``open_inbox`` in the preamble): the
user's eleven keys, the script's own keys, on the fast path the global
markers' keys, then the months' bitmaps; in ARGV the script's own arguments,
then now, the months, and the mode (run as is, planned settle and merge, or
the fast path). An op object holds the script's own keys and arguments by
name; ``inbox_call`` lays out the rest. Every key comes from core.keys;
those of one call share the user's hash tag, except the fast path's global
markers (single Redis only).
"""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

from django.conf import settings

from core import keys
from core.lua import LuaScript
from core.redis import get_redis, is_cluster
from durability import healing
from live import keys as live_keys
from messagecenter import keys as mc_keys
from messagecenter.readmodel import readcache
from messagecenter.readmodel.entries import CATEGORY_ORDER

# The shared helpers, each in one file: the month bit-sets' two forms and an
# item's layout and insertion, the call's state with the read marks and
# counters, settling many members in a few commands, placing a fan-out's
# arrivals, the bounded settling steps, removal and expiry, merging, the
# inbox's opening, the read cache (page and counts only). Each script runs as one chunk, so a helper is defined
# before the helpers that call it: this order.
BITS = "../lua/_bits.lua"
ITEM = (BITS, "../lua/_bits_many.lua", "../lua/_item.lua")
INBOX = (
    *ITEM,
    "../lua/_state.lua",
    "../lua/_batch.lua",
    "../lua/_arrivals.lua",
    "../lua/_steps.lua",
    "../lua/_settle.lua",
    "../lua/_merge.lua",
    "../lua/_inbox.lua",
)
CACHE = "../lua/_cache.lua"
# Where a member is (live, archived, snoozed) and how it leaves the list.
PARK = (*INBOX, "../lua/_park.lua")


def _script(name: str, *preambles: str) -> LuaScript:
    return LuaScript(__file__, f"../lua/{name}", preambles=preambles or INBOX)


def _cached_script(name: str) -> LuaScript:
    # The read cache's tag as readcache defines it, for _cache.lua.
    return LuaScript(__file__, f"../lua/{name}", preambles=(*INBOX, CACHE), constants=readcache.LUA_CONSTANTS)


PAGE_SCRIPT = _cached_script("page.lua")
COUNTS_SCRIPT = _cached_script("counts.lua")
GET_SCRIPT = _script("get.lua")
MARK_SCRIPT = _script("mark.lua")
HIDE_SCRIPT = _script("hide.lua")
READ_ALL_SCRIPT = _script("read_all.lua")
SEEN_SCRIPT = _script("seen.lua")
DROP_PREFIX_SCRIPT = _script("drop_prefix.lua")
SWEEP_SCRIPT = _script("sweep.lua")
# A fan-out only adds: its script needs none of the inbox helpers, only the grouping.
DELIVER_SCRIPT = LuaScript(__file__, "../lua/deliver.lua", preambles=("../lua/_group.lua",))
FILL_ITEMS_SCRIPT = _script("fill_items.lua")
ARCHIVE_SCRIPT = _script("archive.lua", *PARK)
UNARCHIVE_SCRIPT = _script("unarchive.lua", *PARK)
SNOOZE_SCRIPT = _script("snooze.lua", *PARK)
BULK_MARK_SCRIPT = _script("bulk_mark.lua", *PARK)

INBOX_SCRIPTS = (
    PAGE_SCRIPT,
    COUNTS_SCRIPT,
    GET_SCRIPT,
    MARK_SCRIPT,
    HIDE_SCRIPT,
    READ_ALL_SCRIPT,
    SEEN_SCRIPT,
    DROP_PREFIX_SCRIPT,
    SWEEP_SCRIPT,
    ARCHIVE_SCRIPT,
    UNARCHIVE_SCRIPT,
    SNOOZE_SCRIPT,
    BULK_MARK_SCRIPT,
    FILL_ITEMS_SCRIPT,
)
LuaScript.load_together([*INBOX_SCRIPTS, DELIVER_SCRIPT])


def inbox_keys(user_id: int) -> list[str]:
    """The eleven keys every inbox script opens first, in the preamble's order
    (the archived and snoozed zsets close every call's KEYS: ``_call_keys``)."""
    return [
        mc_keys.inbox(user_id),
        *(mc_keys.inbox_category(user_id, c) for c in CATEGORY_ORDER),
        mc_keys.inbox_counters(user_id),
        mc_keys.inbox_hidden(user_id),
        mc_keys.inbox_expiry(user_id),
        mc_keys.inbox_months(user_id),
        mc_keys.inbox_state(user_id),
        mc_keys.bulletin_access_time(user_id),
    ]


def unread_keys(user_id: int) -> list[str]:
    """The user's unread zsets: all, then each category in CATEGORY_ORDER."""
    return [mc_keys.inbox_unread(user_id), *(mc_keys.inbox_unread(user_id, c) for c in CATEGORY_ORDER)]


def fast_keys() -> list[str]:
    """The global markers the fast path checks itself, in the preamble's order."""
    return [
        mc_keys.removed_version(),
        mc_keys.pull_sequence(),
        mc_keys.bulletin_update_time(),
        mc_keys.bulletin_config(),
        mc_keys.item_detail(),
        mc_keys.item_detail_version(),
        mc_keys.first_reads_pending(),
    ]


@dataclass(frozen=True)
class Merge:
    """The planned settle and merge (mode "1"): what ``_plan`` found to do."""

    settled_version: int | None  # the removal version settled to (None: unchanged)
    removals: Sequence[str]
    candidates: Sequence[tuple[str, int, int]]  # (member, time ms, expire ms) to merge
    access: int | None  # bulletin update marker taken in (None: unchanged)
    display: int | None  # latest bulletin display time taken in
    pull: int | None  # pull sequence taken in
    max_items: int
    step: int  # the most members the call settles, all its settling steps together

    @property
    def idle(self) -> bool:
        """Nothing to settle, merge or take in: the fast path's check would pass."""
        return (
            self.settled_version is None
            and not self.removals
            and not self.candidates
            and self.access is None
            and self.display is None
            and self.pull is None
        )

    def args(self) -> list[Any]:
        out: list[Any] = ["1", self.step, "" if self.settled_version is None else self.settled_version]
        out.append(len(self.removals))
        out.extend(self.removals)
        out.append(len(self.candidates))
        for member, time_ms, expire_ms in self.candidates:
            out.extend((member, time_ms, expire_ms))
        for marker in (self.access, self.display, self.pull):
            out.append("" if marker is None else marker)
        out.append(self.max_items)
        return out


@dataclass(frozen=True)
class Fast:
    """The fast path (mode "2"): the script checks itself that nothing needs
    settling or merging, else answers STALE having changed nothing."""

    max_items: int
    step: int


@dataclass(frozen=True)
class Settle:
    """Settle only (mode "3"): what an "AGAIN" answer left (expired members, the
    cap, a fan-out's evictions), at most ``step`` members in the call, then the op."""

    max_items: int
    step: int


Mode = Merge | Fast | Settle | None


@dataclass(frozen=True)
class InboxOp:
    """One script's own KEYS (after the inbox's eleven) and ARGV (first)."""

    script: ClassVar[LuaScript]
    ever: ClassVar[bool] = False  # the script also takes the ever-read bitmaps
    kinds: ClassVar[dict[str, type["InboxOp"]]] = {}

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        InboxOp.kinds[cls.__name__] = cls

    @staticmethod
    def own_keys(user_id: int) -> tuple[str, ...]:
        return ()

    def own_args(self) -> list[Any]:
        return []


@dataclass(frozen=True)
class PageOp(InboxOp):
    """page.lua: positions are times on the inbox's score axis (ms)."""

    script: ClassVar[LuaScript] = PAGE_SCRIPT
    category: str
    time_max: int | None  # the page starts at this time (None: the newest)
    skip: int  # items at exactly time_max already returned
    limit: int
    unread_only: bool
    since_time: int | None  # only items strictly newer
    cache_field: str  # the read cache's field of this query ("" = none)

    @staticmethod
    def own_keys(user_id: int) -> tuple[str, ...]:
        # The answers set: the fast path answers the reader's answers to the
        # page's rows too (the groups hash, which every call names, their groups).
        return (mc_keys.inbox_pages(user_id), live_keys.user_version(user_id), mc_keys.inbox_answers(user_id))

    def own_args(self) -> list[Any]:
        return [
            self.category,
            "+inf" if self.time_max is None else self.time_max,
            self.skip,
            self.limit,
            "1" if self.unread_only else "0",
            "-inf" if self.since_time is None else f"({self.since_time}",
            self.cache_field,
        ]


@dataclass(frozen=True)
class CountsOp(InboxOp):
    """counts.lua; without a cache lifetime it only settles and merges."""

    script: ClassVar[LuaScript] = COUNTS_SCRIPT
    cache_seconds: int | None = None

    @staticmethod
    def own_keys(user_id: int) -> tuple[str, ...]:
        return mc_keys.inbox_pages(user_id), live_keys.user_version(user_id)

    def own_args(self) -> list[Any]:
        return ["" if self.cache_seconds is None else self.cache_seconds]


@dataclass(frozen=True)
class GetOp(InboxOp):
    script: ClassVar[LuaScript] = GET_SCRIPT
    member: str  # "" on the fast path: the script finds it in the detail of ``ref``
    ref: str = ""

    def own_args(self) -> list[Any]:
        return [self.member, self.ref]


@dataclass(frozen=True)
class MarkOp(InboxOp):
    script: ClassVar[LuaScript] = MARK_SCRIPT
    ever: ClassVar[bool] = True
    member: str
    read: bool
    hour: int  # the hour bucket a first read counts in (queued by the script on the fast path)

    def own_args(self) -> list[Any]:
        return [self.member, 1 if self.read else 0, self.hour]


@dataclass(frozen=True)
class HideOp(InboxOp):
    script: ClassVar[LuaScript] = HIDE_SCRIPT
    member: str

    def own_args(self) -> list[Any]:
        return [self.member]


@dataclass(frozen=True)
class ReadAllOp(InboxOp):
    script: ClassVar[LuaScript] = READ_ALL_SCRIPT
    ever: ClassVar[bool] = True
    category: str  # "" = every category
    time_max: int | None  # only items timed at or before it (None: all)
    hour: int  # the hour bucket first reads count in

    @staticmethod
    def own_keys(user_id: int) -> tuple[str, ...]:
        return (mc_keys.inbox_scratch(user_id),)

    def own_args(self) -> list[Any]:
        return [self.category, "" if self.time_max is None else self.time_max, self.hour]


@dataclass(frozen=True)
class SeenOp(InboxOp):
    script: ClassVar[LuaScript] = SEEN_SCRIPT


@dataclass(frozen=True)
class DropPrefixOp(InboxOp):
    script: ClassVar[LuaScript] = DROP_PREFIX_SCRIPT
    prefix: str
    parked: tuple[str, ...] = ()  # the members PostgreSQL's rows say are archived or snoozed

    def own_args(self) -> list[Any]:
        return [self.prefix, ",".join(self.parked)]  # (members hold no comma)


@dataclass(frozen=True)
class SweepOp(InboxOp):
    script: ClassVar[LuaScript] = SWEEP_SCRIPT
    limit: int

    @staticmethod
    def own_keys(user_id: int) -> tuple[str, ...]:
        return (mc_keys.user_notifications(user_id),)

    def own_args(self) -> list[Any]:
        return [self.limit]


@dataclass(frozen=True)
class _ParkOp(InboxOp):
    """The member, its score (place in the list or wake time, ms) and expiry (ms, 0 = never)."""

    member: str
    score: int
    expire_ms: int

    def own_args(self) -> list[Any]:
        return [self.member, self.score, self.expire_ms]


@dataclass(frozen=True)
class ArchiveOp(_ParkOp):
    """archive.lua: the item leaves the list for the archived zset at ``score``."""

    script: ClassVar[LuaScript] = ARCHIVE_SCRIPT


@dataclass(frozen=True)
class UnarchiveOp(_ParkOp):
    """unarchive.lua: an archived or snoozed item is back in the list at ``score``."""

    script: ClassVar[LuaScript] = UNARCHIVE_SCRIPT


@dataclass(frozen=True)
class SnoozeOp(_ParkOp):
    """snooze.lua: the item leaves the list until ``score`` (its wake time)."""

    script: ClassVar[LuaScript] = SNOOZE_SCRIPT


@dataclass(frozen=True)
class BulkMarkOp(InboxOp):
    """bulk_mark.lua: many members marked read or unread in one call."""

    script: ClassVar[LuaScript] = BULK_MARK_SCRIPT
    ever: ClassVar[bool] = True
    members: tuple[str, ...]
    read: bool

    def own_args(self) -> list[Any]:
        return [1 if self.read else 0, ",".join(self.members)]


@dataclass(frozen=True)
class FillItemsOp(InboxOp):
    """fill_items.lua: a fill's items placed at once, ``items`` a line each
    ("<member> <time ms> <expire ms> <1 for a notification, else 0>")."""

    script: ClassVar[LuaScript] = FILL_ITEMS_SCRIPT
    cap: int
    items: str

    @staticmethod
    def own_keys(user_id: int) -> tuple[str, ...]:
        return (mc_keys.user_notifications(user_id), live_keys.user_version(user_id))

    def own_args(self) -> list[Any]:
        return [self.cap, self.items]


# The user whose calls check that their part of the read model is filled
# (``fill_checked``): only the user-facing reads and marks of that user. The
# fill's own writes, fan-outs and background jobs run unchecked, so they never
# meet an "UNFILLED" or "REGROUP" answer.
_checked_user: ContextVar[int | None] = ContextVar("inbox_checked_user", default=None)
UNFILLED = b"UNFILLED"
REGROUP = b"REGROUP"


class GroupRowExpired(healing.UserNotFilled):
    """A checked call met the expired row of a group of several items: Redis cannot
    name the group's next row (the items' details live in another slot), so the
    user's part is filled again from PostgreSQL, where the group re-forms."""


# How long a write of a user may be in flight, from its note in the state hash
# to its Redis half (fill.part_writing), before a checked call takes its
# process for dead: far longer than a request takes to commit and reach
# Redis, and the longest a user can see Redis lack a write that a dying
# process committed.
WRITE_GRACE_MS = 5_000


def _fill_check() -> str:
    """A checked call's last argument: "<generation>:<idle ms>:<grace ms>" (no
    generation with healing off: the part counts as filled and does not expire)."""
    return f"{healing.user_generation()}:{idle_ms()}:{WRITE_GRACE_MS}"


def idle_ms() -> int:
    """How long a filled user's part stays in Redis without a checked call (ms)."""
    return int(settings.MESSAGECENTER_USER_IDLE_SECONDS) * 1000


@contextmanager
def fill_checked(user_id: int) -> Iterator[None]:
    """Within this block this user's inbox calls raise ``healing.UserNotFilled``
    when the user's part of the read model is not filled for this generation."""
    token = _checked_user.set(user_id)
    try:
        yield
    finally:
        _checked_user.reset(token)


@dataclass(frozen=True)
class InboxCall:
    """One script call, laid out: run it alone, or queue it among others."""

    script: LuaScript
    keys: list[str]
    args: list[Any]
    user_id: int = 0

    def __call__(self, client: Any = None) -> Any:
        return self.answer(self.script(self.keys, self.args, client=client))

    def command(self) -> tuple[Any, ...]:
        return self.script.command(self.keys, self.args)

    def queue(self, pipe: Any) -> None:
        self.script.queue(pipe, self.keys, self.args)

    def settle(self, reply: Any) -> Any:
        return self.answer(self.script.settle(reply, self.keys, self.args))

    def answer(self, result: Any) -> Any:
        """The script's answer; "UNFILLED" and "REGROUP" (checked calls only) raised as such."""
        if result == UNFILLED:
            raise healing.UserNotFilled(self.user_id)
        if result == REGROUP:
            raise GroupRowExpired(self.user_id)
        return result


@lru_cache(maxsize=8192)
def _call_keys(_prefix: str, kind: str, user_id: int, months: tuple[str, ...], fast: bool) -> tuple[str, ...]:
    """A call's KEYS, built once per (prefix, script, user, months, path): a page names about 20."""
    op = InboxOp.kinds[kind]
    names = [*inbox_keys(user_id), *op.own_keys(user_id)]
    if fast:
        names += fast_keys()
    names += [mc_keys.read_bitmap(user_id, m) for m in months]
    names += [mc_keys.push_bitmap(user_id, m) for m in months]
    if op.ever:
        names += [mc_keys.read_ever_bitmap(user_id, m) for m in months]
    # Last, whatever the script (open_inbox takes them from the end): the groups hash, the unread
    # zsets (all, then each category), the evicted set, the arrivals, the archived and snoozed zsets.
    names.append(mc_keys.inbox_groups(user_id))
    names += unread_keys(user_id)
    names += [mc_keys.inbox_evicted(user_id), mc_keys.inbox_arrivals(user_id)]
    names += [mc_keys.inbox_archived(user_id), mc_keys.inbox_snoozed(user_id)]
    return tuple(names)


def inbox_call(op: InboxOp, *, user_id: int, now_ms: int, months: Sequence[str], mode: Mode = None) -> InboxCall:
    """The call of ``op``'s script on this user's inbox with these months' bitmaps."""
    months = tuple(months)
    names = _call_keys(keys.prefix(), type(op).__name__, user_id, months, isinstance(mode, Fast))
    args = [*op.own_args(), now_ms, len(months), *months]
    if isinstance(mode, Merge):
        args += mode.args()
    elif isinstance(mode, Fast):
        args += ["2", mode.step, mode.max_items]
    elif isinstance(mode, Settle):
        args += ["3", mode.step, mode.max_items]
    else:
        args.append("0")
    args.append(_fill_check() if _checked_user.get() == user_id else "")
    return InboxCall(op.script, list(names), args, user_id)


def run_inbox_calls(calls: Sequence[InboxCall]) -> list[Any]:
    """Run many per-user script calls: one pipeline on a single Redis.

    On Redis Cluster each call goes to its own slot's node one by one:
    redis-py's ClusterPipeline refuses EVALSHA.
    """
    if not calls:
        return []
    if is_cluster():
        return [call() for call in calls]
    pipe = get_redis().pipeline(transaction=False)
    for call in calls:
        # Through redis-py's Script: SCRIPT EXISTS (and LOAD) first, so no call
        # is refused while a later one, which may rely on its settling, runs.
        call.script(call.keys, call.args, client=pipe)
    return [call.answer(reply) for call, reply in zip(calls, pipe.execute(), strict=True)]
