"""One user's inbox in Redis: settle, merge, then one Lua call per request.

Every user-facing call takes the same route:

1. one pipeline reads the user's small state (months, watermarks, groups)
   and the global markers (removal version, pull sequence, bulletin update
   time, the latest display time that has passed), plus the item's detail
   when the call is about one item;
2. only when a marker moved, a second pipeline fetches what changed: removed
   members above the user's version, pull items above their watermark,
   bulletin configs of their groups (and a third one their details and the
   pull audience bits);
3. one call of the op's script (messagecenter/lua/, built by
   ``scripts.inbox_call``) settles (removals, expiry), merges (bulletins,
   pull items; idempotent ZADD NX, hidden refs skipped) and runs the op,
   keeping the per-category unread counters exact.

Global keys and per-user keys live in different cluster slots, hence the
separate round trips; no script ever touches a key it was not given.

Reads (page, counts) first try one round trip on a single Redis: the script
gets the global markers' keys too, checks itself that nothing needs settling
or merging, and runs the op (the page's details included); it answers
"STALE" without changing anything when something moved, and the route above
runs instead. Which months' bitmaps to pass comes from a hint kept per
process (the script checks it against the user's months set).
"""

import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from django.conf import settings
from redis.exceptions import NoScriptError, RedisError

from core import keys
from core.local_cache import LocalCache
from core.lua import LuaScript
from core.redis import get_redis, is_cluster, round_trip
from insight.reports import hour_of
from live import transport as live
from messagecenter import keys as mc_keys
from messagecenter.mutes import Mutes
from messagecenter.readmodel import bits, grouping, listing, readcache, responses
from messagecenter.readmodel.entries import CATEGORY_ORDER, InboxEntry, parse_member
from messagecenter.readmodel.publish import AUDIENCE_EVERYONE, PULL_GROUPED
from messagecenter.readmodel.reads import record_reads
from messagecenter.readmodel.scripts import (
    ArchiveOp,
    BulkMarkOp,
    CountsOp,
    Fast,
    GetOp,
    HideOp,
    InboxCall,
    InboxOp,
    MarkOp,
    Merge,
    PageOp,
    ReadAllOp,
    SeenOp,
    Settle,
    SnoozeOp,
    UnarchiveOp,
    inbox_call,
    run_inbox_calls,
)

logger = logging.getLogger(__name__)


def _int(value: Any, default: int = 0) -> int:
    if value is None:
        return default
    if isinstance(value, bytes):
        value = value.decode()
    return int(float(value))


@dataclass
class _Plan:
    months: set[str] = field(default_factory=set)
    merge: Merge | None = None
    detail: dict[str, Any] | None = None
    # Bulletin config members the merge looked at: what the bulletin changes
    # since the user's last read cost this read (not the live bulletins).
    bulletins_read: int = 0


class _NamedPipe:
    """A pipeline whose replies are read by the name each command was queued
    under, not by its position: the commands queued vary with what is due."""

    def __init__(self, client: Any) -> None:
        self._pipe = client.pipeline(transaction=False)
        self._names: list[str] = []

    def add(self, name: str) -> Any:
        """The pipeline, to queue the command to be answered under ``name`` on."""
        self._names.append(name)
        return self._pipe

    def execute(self) -> dict[str, Any]:
        if not self._names:
            return {}
        return dict(zip(self._names, self._pipe.execute(), strict=True))


def _bulletin_configs(
    pipe: _NamedPipe, *, full: bool, access: int, update_time: int, shown: int, latest_display: int, now_ms: int
) -> None:
    """Queue the reads of the bulletin configs a merge must look at, under names starting ``configs``.

    The full merge reads every config already displayed. Otherwise only what
    changed for this user: the change log above their access time (configs
    created or edited since, whatever their display time) and the configs
    whose display time came since the last merge ("bd" is the latest display
    time then passed, so nothing displayed in (bd, then] existed that was not
    taken in; a config added there later is in the log as well).
    """
    if full:
        pipe.add("configs").zrangebyscore(mc_keys.bulletin_config(), "-inf", now_ms)
        return
    if update_time > access:
        pipe.add("configs changed").zrangebyscore(mc_keys.bulletin_changes(), f"({access}", update_time)
    if latest_display > shown:
        pipe.add("configs displayed").zrangebyscore(mc_keys.bulletin_config(), f"({shown}", now_ms)


@dataclass(frozen=True)
class _Markers:
    """Step 1's answer: the user's small state and the global markers."""

    months: set[str]
    groups: set[str]  # the user's groups and "0" (everyone)
    mutes: Mutes
    detail: dict[str, Any] | None  # the item's, when the call is about one item
    settled: int  # removal version the inbox is settled to
    version: int  # removal version now
    pull_wm: int  # pull sequence taken in
    seq: int  # pull sequence now
    update_time: int  # bulletin update marker now
    latest_display: int  # display time of the latest bulletin displayed by now
    access: int | None  # bulletin update marker taken in (None: nothing merged yet)
    # "bd" (bulletin display): display time of the latest bulletin merged into this inbox.
    shown: int | None
    removed_floor: int
    changes_floor: int | None  # the bulletin change log's floor (None: no log yet)

    @property
    def settle_due(self) -> bool:
        return self.version > self.settled

    @property
    def pull_due(self) -> bool:
        return self.seq > self.pull_wm

    @property
    def full_settle(self) -> bool:
        """Removals below the floor were trimmed: such a user re-checks every
        item against the details (removed items have none) and re-merges
        bulletins (an edited one may have moved)."""
        return self.settle_due and self.settled < self.removed_floor

    @property
    def merge_bulletins(self) -> bool:
        if self.full_settle or self.access is None or self.shown is None:
            return True
        return self.update_time > self.access or self.latest_display > self.shown

    @property
    def full_bulletins(self) -> bool:
        """Every live bulletin once: nothing merged yet (new user, groups
        changed), removals trimmed, or changes the log does not hold (its floor
        is above the user's access time, or it has none yet)."""
        if self.full_settle or self.access is None or self.shown is None or self.changes_floor is None:
            return True
        return self.access < self.changes_floor


def _optional_int(value: Any) -> int | None:
    return None if value is None else _int(value)


def _markers_read(client: Any, user_id: int, now_ms: int, ref: str | None) -> _Markers:
    """Step 1: one pipeline reads the user's state and the global markers."""
    pipe = _NamedPipe(client)
    pipe.add("months").smembers(mc_keys.inbox_months(user_id))
    pipe.add("state").hgetall(mc_keys.inbox_state(user_id))
    pipe.add("access").get(mc_keys.bulletin_access_time(user_id))
    pipe.add("groups").smembers(mc_keys.user_groups(user_id))
    # The bulletin marker before the removal version: an edit moves both in
    # one script, and a read that saw the new marker with the old version
    # would merge the edited bulletin while its old member still stands (NX:
    # nothing changes), then settle the edit's removal with nothing left to merge.
    pipe.add("update").get(mc_keys.bulletin_update_time())
    pipe.add("version").get(mc_keys.removed_version())
    pipe.add("seq").get(mc_keys.pull_sequence())
    pipe.add("latest").zrevrangebyscore(mc_keys.bulletin_config(), now_ms, "-inf", start=0, num=1, withscores=True)
    pipe.add("removed floor").get(mc_keys.removed_floor())
    pipe.add("changes floor").get(mc_keys.bulletin_changes_floor())
    pipe.add("mutes").get(mc_keys.user_mutes(user_id))
    if ref is not None:
        pipe.add("detail").hget(mc_keys.item_detail(), ref)
    return _markers_of(pipe.execute())


def _markers_of(replies: dict[str, Any]) -> _Markers:
    months = {m.decode() for m in replies["months"]}
    raw_detail = replies.get("detail")
    detail = json.loads(raw_detail) if raw_detail is not None else None
    if detail is not None:
        months.add(parse_member(detail["member"])[2])
    state = {k.decode(): v for k, v in replies["state"].items()}
    latest = replies["latest"]
    return _Markers(
        months=months,
        groups={"0", *(g.decode() for g in replies["groups"])},
        mutes=Mutes.loads(replies["mutes"]),
        detail=detail,
        settled=_int(state.get("settled")),
        version=_int(replies["version"]),
        pull_wm=_int(state.get("pull")),
        seq=_int(replies["seq"]),
        update_time=_int(replies["update"]),
        latest_display=_int(latest[0][1]) if latest else 0,
        access=_optional_int(replies["access"]),
        shown=_optional_int(state.get("bd")),
        removed_floor=_int(replies["removed floor"]),
        changes_floor=_optional_int(replies["changes floor"]),
    )


@dataclass
class _Found:
    """What steps 2 and 3 found to settle and merge."""

    removed: list[str] = field(default_factory=list)
    candidates: list[tuple[str, int, int]] = field(default_factory=list)  # (member, score, expire)
    arrivals: dict[str, int] = field(
        default_factory=dict
    )  # member -> time on the mute rule's axis, where not its score
    bulletins_read: int = 0
    grouped: set[str] = field(default_factory=set)  # pulled members sent with a group key (publish.PULL_GROUPED)


@dataclass(frozen=True)
class _Changes:
    """Step 2's answer: what changed since the user's inbox last took things in."""

    removed: list[str]  # members to remove
    held: list[str]  # items (not bulletins) to check against their details: full settle only
    pulls: list[str]  # pull entries above the user's watermark
    configs: list[str]  # bulletin config members to look at


def _changes_read(client: Any, user_id: int, now_ms: int, markers: _Markers) -> _Changes:
    """Step 2: a second pipeline fetches what changed past the moved markers."""
    pipe = _NamedPipe(client)
    if markers.full_settle:
        pipe.add("removed").zrange(mc_keys.inbox(user_id), 0, -1)
    elif markers.settle_due:
        pipe.add("removed").zrangebyscore(mc_keys.removed(), f"({markers.settled}", markers.version)
    if markers.pull_due:
        pipe.add("pulls").zrangebyscore(mc_keys.pull(), f"({markers.pull_wm}", markers.seq)
    if markers.merge_bulletins:
        _bulletin_configs(
            pipe,
            full=markers.full_bulletins,
            access=markers.access or 0,
            update_time=markers.update_time,
            shown=markers.shown or 0,
            latest_display=markers.latest_display,
            now_ms=now_ms,
        )
    return _changes_of(pipe.execute(), full_settle=markers.full_settle)


def _changes_of(replies: dict[str, Any], *, full_settle: bool) -> _Changes:
    removed = [m.decode() for m in replies.get("removed", [])]
    # A full settle read the whole inbox: its bulletins are removed (merged
    # again if still live), its items checked against their details.
    held = [m for m in removed if not m.startswith("b")] if full_settle else []
    if full_settle:
        removed = [m for m in removed if m.startswith("b")]
    # A config both changed and newly due comes once.
    configs: dict[str, None] = {}
    for name, reply in replies.items():
        if name.startswith("configs"):
            configs.update(dict.fromkeys(m.decode() for m in reply))
    return _Changes(
        removed=removed,
        held=held,
        pulls=[m.decode() for m in replies.get("pulls", [])],
        configs=list(configs),
    )


def _pulls_split(pulls: Sequence[str], now_ms: int, found: _Found) -> list[tuple[str, int, int, str]]:
    """Pull items for everyone become candidates; those for an audience
    bitmap are returned (member, score, expire, ref) to look up the user's bit."""
    bitmap_pulls: list[tuple[str, int, int, str]] = []
    for pull in pulls:
        # <ref>|<category>|<month>|<offset>|<score>|<expire>|<audience>[|<grouped>]
        parts = pull.split("|")
        member, score, expire, audience = "|".join(parts[:4]), int(parts[4]), int(parts[5]), parts[6]
        if parts[7:] == [PULL_GROUPED]:
            found.grouped.add(member)
        if expire and expire <= now_ms:
            continue
        if audience == AUDIENCE_EVERYONE:
            found.candidates.append((member, score, expire))
        else:
            bitmap_pulls.append((member, score, expire, parts[0]))
    return bitmap_pulls


def _held_check(held: Sequence[str], raws: Sequence[Any], found: _Found) -> None:
    """Items whose detail is gone, or names another member, are removed."""
    for member, raw in zip(held, raws, strict=True):
        if raw is None or json.loads(raw).get("member") != member:
            found.removed.append(member)


def _configs_merge(raws: Sequence[Any], now_ms: int, found: _Found) -> None:
    for raw in raws:
        if raw is None:
            continue
        config = json.loads(raw)
        if config["expire"] and config["expire"] <= now_ms:
            continue
        if int(config["score"]) > now_ms:
            continue  # changed but not displayed yet: merged when its display time comes
        found.candidates.append((config["member"], int(config["score"]), int(config["expire"])))
        # A bulletin arrives when it is created or when it may first show, whichever is later.
        found.arrivals[config["member"]] = max(int(config["score"]), int(config.get("arrived", 0)))


def _details_read(
    client: Any,
    user_id: int,
    now_ms: int,
    changes: _Changes,
    visible_configs: Sequence[str],
    bitmap_pulls: Sequence[tuple[str, int, int, str]],
    found: _Found,
) -> None:
    """Step 3: a third pipeline reads the details of the held items and of the
    visible configs, and the user's bit in each pull's audience."""
    pipe = _NamedPipe(client)
    if changes.held:
        pipe.add("held").hmget(mc_keys.item_detail(), [parse_member(m)[0] for m in changes.held])
    if visible_configs:
        pipe.add("configs").hmget(mc_keys.bulletin_detail(), visible_configs)
    chunk_size = int(settings.MESSAGECENTER_BITMAP_CHUNK_USERS)
    chunk, bit = divmod(user_id, chunk_size)
    for i, (_member, _score, _expire, pull_ref) in enumerate(bitmap_pulls):
        pipe.add(f"audience {i}").getbit(mc_keys.pull_audience(pull_ref, chunk), bit)
    replies = pipe.execute()
    if changes.held:
        _held_check(changes.held, replies["held"], found)
    if visible_configs:
        _configs_merge(replies["configs"], now_ms, found)
    for i, (member, score, expire, _ref) in enumerate(bitmap_pulls):
        if replies[f"audience {i}"]:
            found.candidates.append((member, score, expire))


def _found(client: Any, user_id: int, now_ms: int, markers: _Markers) -> _Found:
    """Steps 2 and 3, when a marker moved: what there is to settle and merge."""
    if not (markers.settle_due or markers.pull_due or markers.merge_bulletins):
        return _Found()
    changes = _changes_read(client, user_id, now_ms, markers)
    found = _Found(removed=list(changes.removed), bulletins_read=len(changes.configs))
    visible_configs = [c for c in changes.configs if c.rsplit("_", 1)[1] in markers.groups]
    bitmap_pulls = _pulls_split(changes.pulls, now_ms, found)
    if visible_configs or bitmap_pulls or changes.held:
        _details_read(client, user_id, now_ms, changes, visible_configs, bitmap_pulls, found)
    return found


def _unmuted(
    candidates: list[tuple[str, int, int]], mutes: Mutes, arrivals: dict[str, int]
) -> list[tuple[str, int, int]]:
    """Items that arrived while the user muted their category never merge (messagecenter.mutes)."""
    if mutes.empty:
        return candidates
    return [c for c in candidates if not mutes.hides(category=parse_member(c[0])[1], time_ms=arrivals.get(c[0], c[1]))]


def _plan(user_id: int, now_ms: int, ref: str | None = None) -> _Plan:
    client = get_redis()
    markers = _markers_read(client, user_id, now_ms, ref)
    found = _found(client, user_id, now_ms, markers)
    candidates = _unmuted(found.candidates, markers.mutes, found.arrivals)
    if found.grouped and candidates:  # grouped broadcasts join their groups first (readmodel.grouping)
        candidates = grouping.merge_candidates(user_id=user_id, candidates=candidates, grouped=found.grouped)
    plan = _Plan(months=markers.months, detail=markers.detail, bulletins_read=found.bulletins_read)
    for member, _score, _expire in candidates:
        plan.months.add(parse_member(member)[2])
    merge_bulletins = markers.merge_bulletins
    plan.merge = Merge(
        settled_version=markers.version if markers.settle_due else None,
        removals=found.removed,
        candidates=candidates,
        access=markers.update_time if merge_bulletins else None,
        display=markers.latest_display if merge_bulletins else None,
        pull=markers.seq if markers.pull_due else None,
        max_items=int(settings.MESSAGECENTER_INBOX_MAX_ITEMS),
        step=_settle_step(),
    )
    return plan


# user id -> months (``yyyymm``) of the user's bitmaps, as last planned: the
# fast path passes those bitmaps. Only a hint: the script checks it.
months_hints: LocalCache[int, tuple[str, ...]] = LocalCache("inbox months hints", maxsize=100_000)
STALE = b"STALE"
# A script's answer when settling left members for its next call (bounded
# steps, _inbox.lua): the op has not run; ``_settled`` calls again.
AGAIN = b"AGAIN"
# Calls after an "AGAIN" before giving up: each removes up to a step's worth
# of members, so this bounds a legacy inbox far over the cap (never reached
# by one written with caps on write).
SETTLE_ROUNDS_MAX = 10_000


def _settle_step() -> int:
    return int(settings.MESSAGECENTER_INBOX_SETTLE_STEP)


def _unanswered(result: Any) -> bool:
    """The fast path did not answer (something to plan, or to settle in more steps)."""
    return bool(result == STALE or result == AGAIN)


def _settled(user_id: int, now_ms: int, op: InboxOp, months: Sequence[str], result: Any) -> Any:
    """The op's answer once its inbox is settled: while a call answers "AGAIN"
    (bounded settling left members for later) it is repeated in settle-only
    mode, each call bounded; the op runs in the call that finds nothing left."""
    mode = Settle(max_items=int(settings.MESSAGECENTER_INBOX_MAX_ITEMS), step=_settle_step())
    rounds = 0
    while result == AGAIN:
        rounds += 1
        if rounds > SETTLE_ROUNDS_MAX:
            raise RedisError(f"inbox of user {user_id} still settling after {SETTLE_ROUNDS_MAX} calls")
        result = inbox_call(op, user_id=user_id, now_ms=now_ms, months=months, mode=mode)()
    return result


def months_hint_forget(user_id: int) -> None:
    """Forget the user's months hint: their part was just filled again, and until
    its first read merges what users share (bulletins, pull items: a fill
    leaves that to the read) the fast path would only answer STALE, a round
    trip for nothing."""
    months_hints.pop(user_id)


def _hinted(user_id: int, plan: _Plan) -> list[str]:
    """The plan's months, sorted, kept as the user's months hint."""
    months = sorted(plan.months)
    months_hints[user_id] = tuple(months)
    return months


def _run(user_id: int, now_ms: int, op: InboxOp, plan: _Plan) -> Any:
    months = _hinted(user_id, plan)
    result = inbox_call(op, user_id=user_id, now_ms=now_ms, months=months, mode=plan.merge)()
    return _settled(user_id, now_ms, op, months, result)


def _fast_planned(user_id: int, now_ms: int, op: InboxOp, plan: _Plan) -> Any | None:
    """The op by the fast path when planning found nothing to settle or merge
    (a user this process has no months hint of, whose inbox is level: the
    common first read after a restart), else None. The fast path answers
    what the planned one does and more in the same call: a page's details
    and the tag its rendering is kept under, the counts kept in the read
    cache; the planned path would need another round trip for the details.
    Should the inbox have changed since the plan, the script answers STALE
    having changed nothing, and the caller runs the plan."""
    if plan.merge is None or not plan.merge.idle or is_cluster():
        return None
    result = _fast_call_on(user_id, now_ms, op, _hinted(user_id, plan))()
    return None if _unanswered(result) else result


def _fast_call(user_id: int, now_ms: int, op: InboxOp) -> InboxCall | None:
    """The op's one-round-trip call, or None when it cannot apply.

    Single Redis only: the script reads the global markers itself, which on
    a cluster live in another slot. None also when the months hint is missing;
    a hint out of date makes the script answer STALE. The script changes
    nothing when it answers STALE, so a write op (read_all) is safe here too.
    """
    months = months_hints.get(user_id)
    if months is None or is_cluster():
        return None
    return _fast_call_on(user_id, now_ms, op, months)


def _fast_call_on(user_id: int, now_ms: int, op: InboxOp, months: Sequence[str]) -> InboxCall:
    """The op's fast-path call over these months (the user's, as the caller knows them)."""
    mode = Fast(max_items=int(settings.MESSAGECENTER_INBOX_MAX_ITEMS), step=_settle_step())
    return inbox_call(op, user_id=user_id, now_ms=now_ms, months=months, mode=mode)


def _fast(user_id: int, now_ms: int, op: InboxOp) -> Any | None:
    """The op in one round trip when nothing needs settling or merging, else None."""
    call = _fast_call(user_id, now_ms, op)
    if call is None:
        return None
    result = call()
    return None if _unanswered(result) else result


def _answer(user_id: int, now_ms: int, op: InboxOp, planned: InboxOp | None = None) -> tuple[Any, bool]:
    """Run a read op: the one-round-trip path when it applies, else plan, then
    the fast path after all when the plan found nothing to do, else the plan
    (with ``planned``, the op as the planned script takes it, when given).
    The answer, and whether a fast path gave it (and kept in the read cache
    what the op asks it to keep)."""
    result = _fast(user_id, now_ms, op)
    if result is not None:
        return result, True
    plan = _plan(user_id, now_ms)
    result = _fast_planned(user_id, now_ms, op, plan)
    if result is not None:
        return result, True
    if plan.merge is not None and not is_cluster():
        result = _merged_then_fast(user_id, now_ms, op, plan)
        if result is not None:
            return result, True
        plan = _plan(user_id, now_ms)  # the merge has run (or part of it): plan afresh
    return _run(user_id, now_ms, planned or op, plan), False


def _merged_then_fast(user_id: int, now_ms: int, op: InboxOp, plan: _Plan) -> Any | None:
    """On a single Redis, the plan's settle and merge and then the op by the fast
    path, in one pipeline: the merge leaves the inbox level, so the fast call
    answers with what only it brings (a page's details, the rendering's tag),
    where the planned script's answer would need another round trip for the
    details. None when the fast call did not answer (the merge left members
    for later, a script had to be loaded, or the inbox changed in between)."""
    months = _hinted(user_id, plan)
    merge = inbox_call(CountsOp(), user_id=user_id, now_ms=now_ms, months=months, mode=plan.merge)
    fast = _fast_call_on(user_id, now_ms, op, months)
    pipe = get_redis().pipeline(transaction=False)
    merge.queue(pipe)
    fast.queue(pipe)
    merged, answered = pipe.execute(raise_on_error=False)
    if merge.settle(merged) == AGAIN or isinstance(answered, Exception):
        return None  # the merge (rerun if it was refused) is done or continues in the plan's steps
    result = fast.settle(answered)
    return None if _unanswered(result) else result


def _read(user_id: int, now_ms: int, op: InboxOp) -> Any:
    """A read op's answer (``_answer``)."""
    return _answer(user_id, now_ms, op)[0]


@dataclass(frozen=True)
class Counts:
    unread_by_category: dict[str, int]
    unseen: int

    @property
    def unread(self) -> int:
        return sum(self.unread_by_category.values())


def _counts(raw: list[Any]) -> Counts:
    flat, unseen = raw
    by_category = dict.fromkeys(CATEGORY_ORDER, 0)
    for i in range(0, len(flat), 2):
        name = flat[i].decode()
        if name in by_category:
            by_category[name] = max(0, _int(flat[i + 1]))
    return Counts(by_category, int(unseen))


@dataclass(frozen=True)
class PageRow:
    ref: str
    score: int
    read: bool
    detail: dict[str, Any]
    # A grouped row's group, when the page read it (the fast path): not part of
    # what a page says, since the other paths add it later (selectors.grouped_items).
    group: dict[str, Any] | None = field(default=None, compare=False)
    # The reader's answer to the row's actions, (action, at ms), when the page
    # read it (the fast path; None also when unanswered): like ``group``, the
    # other paths add it later.
    response: tuple[str, int] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Page:
    rows: list[PageRow]
    next_position: tuple[int, int] | None  # (max score, items at it already returned)
    counts: Counts
    cache_tag: tuple[str, str] | None = None  # (tag, valid until ms) to store a rendering under
    groups_read: bool = field(default=False, compare=False)  # the rows carry their groups (Redis answered the page)
    responses_read: bool = field(default=False, compare=False)  # and the reader's answers (the fast path)


@dataclass(frozen=True)
class CachedPage:
    """A rendered page the page cache still holds (op "page", fast path)."""

    body: bytes


# How long a rendered page is kept: only users polling now hold one.
PAGE_CACHE_SECONDS = 300


@lru_cache(maxsize=16_384)
def _detail(raw: bytes) -> dict[str, Any]:
    """An item's detail JSON, parsed once per distinct content (details are
    shared by every reader of an item; callers never mutate the dict)."""
    return dict(json.loads(raw))


def inbox_page(
    *,
    user_id: int,
    now_ms: int,
    category: str | None,
    max_score: int | None,
    skip: int,
    limit: int,
    unread_only: bool,
    since_ms: int | None,
    cache_field: str = "",
) -> Page | CachedPage:
    """A page with the whole inbox's counts. With ``cache_field`` (a first
    page's query) the page cache answers when it holds a current rendering
    (``CachedPage``); a computed page then carries the tag to store its
    rendering under (``page_cache_put``)."""
    if cache_field:
        body = cache_get(user_id=user_id, field=cache_field, now_ms=now_ms)
        if body is not None:
            return CachedPage(body=body)
    # The cursor (max_score, skip) and since_ms are times on the inbox's one
    # axis: item scores are their times in ms (core.mc_keys.inbox).
    op = PageOp(
        category=category or "",
        time_max=max_score,
        skip=skip,
        limit=limit,
        unread_only=unread_only,
        since_time=since_ms,
        cache_field=cache_field,
    )
    result = _read(user_id, now_ms, op)
    if result[0] == b"HIT":
        _cache_hint_add(user_id, cache_field)
        return CachedPage(body=result[1])
    return _page_of(result)


def _page_of(result: list[Any]) -> Page:
    """A page from page.lua's reply (the planned path's reply carries the
    groups but no details, which live in another cluster slot: they are read
    here, and the answers by the selector)."""
    members, scores, reads, position, counts, details_read, cache_raw, groups, *answered = result
    refs = [m.decode().split("|", 1)[0] for m in members]
    details: list[Any] = (
        details_read if details_read is not None else get_redis().hmget(mc_keys.item_detail(), refs) if refs else []
    )
    cache = cache_raw or None
    answers: list[Any] = answered[0] if answered else [None] * len(refs)
    rows = []
    for ref, score, read, raw, group, answer in zip(refs, scores, reads, details, groups, answers, strict=True):
        if raw is None:  # removed a moment ago; the next read settles it
            continue
        detail = _detail(raw)
        rows.append(
            PageRow(
                ref=ref,
                score=_int(score),
                read=bool(int(read)),
                detail=detail,
                group=grouping.group_of(group),
                response=None if answer is None else responses.response_of(answer, detail.get("actions") or ()),
            )
        )
    more, pos_score, pos_skip = position
    next_position = (_int(pos_score), int(pos_skip)) if int(more) else None
    return Page(
        rows=rows,
        next_position=next_position,
        counts=_counts(counts),
        cache_tag=(cache[0].decode(), cache[1].decode()) if cache else None,
        groups_read=True,
        responses_read=bool(answered),
    )


# Items (and, for a search, their details) read per round trip while a
# listing walks: the first batch answers a page at once, later ones grow.
LISTING_BATCH_FIRST = 100
LISTING_BATCH_MAX = 2_000


def _listing_key(*, user_id: int, category: str | None, unread_only: bool, archived: bool) -> str:
    if archived:
        return mc_keys.inbox_archived(user_id)
    if unread_only:
        # The unread zset holds exactly the live unread items (_item.lua).
        return mc_keys.inbox_unread(user_id, category or "")
    if category:
        return mc_keys.inbox_category(user_id, category)
    return mc_keys.inbox(user_id)


@dataclass
class _ListingWalk:
    """A listing read in growing batches as ``listing.walk`` asks: the members
    and scores read so far, their details when searching, and the user's
    read bitmaps (read once, with the first batch)."""

    client: Any
    user_id: int
    key: str
    top: int | str
    bottom: str
    months: Sequence[str]
    category: str | None
    archived: bool
    unread_only: bool
    skip: int
    text: str | None
    language: str | None
    members: list[str] = field(default_factory=list)
    scores: list[int] = field(default_factory=list)
    details: list[bytes | None] = field(default_factory=list)
    bitmaps: dict[str, bits.Bits] = field(default_factory=dict)

    def _read(self, raw_offset: int, size: int) -> list[Any]:
        pipe = self.client.pipeline(transaction=False)
        pipe.zrevrangebyscore(self.key, self.top, self.bottom, start=raw_offset, num=size, withscores=True)
        first = not self.bitmaps and bool(self.months)
        if first:
            for month in self.months:
                bits.queue(pipe, mc_keys.read_bitmap(self.user_id, month))
        replies = iter(bits.execute(pipe))
        rows: list[Any] = next(replies)
        if first:
            self.bitmaps.update((month, bits.take(replies)) for month in self.months)
        return rows

    def _fresh(self, rows: Sequence[Any], dropped: int) -> tuple[list[tuple[str, int]], int]:
        """The batch's members the walk counts, and how many at the cursor's time were dropped so far."""
        fresh = [(m.decode(), int(score)) for m, score in rows]
        if self.archived and self.category:  # one zset holds every category's archived items
            fresh = [(m, score) for m, score in fresh if parse_member(m)[1] == self.category]
        if self.unread_only:  # the walk (and so the cursor) counts unread items only, as page.lua's
            fresh = [(m, score) for m, score in fresh if not self.member_read(m)]
        if dropped < self.skip:  # the items at the cursor's time already walked
            cut = min(self.skip - dropped, len(fresh))
            fresh, dropped = fresh[cut:], dropped + cut
        return fresh, dropped

    def batches(self) -> Iterator[int]:
        """The listing's scores after the cursor's position, read as the walk asks."""
        raw_offset, dropped, size = 0, 0, LISTING_BATCH_FIRST
        while True:
            rows = self._read(raw_offset, size)
            raw_offset += len(rows)
            fresh, dropped = self._fresh(rows, dropped)
            if self.text is not None and fresh:
                refs = [m.split("|", 1)[0] for m, _s in fresh]
                self.details.extend(self.client.hmget(mc_keys.item_detail(), refs))
            for member, score in fresh:
                self.members.append(member)
                self.scores.append(score)
                yield score
            if len(rows) < size:
                return
            size = min(size * 4, LISTING_BATCH_MAX)

    def member_read(self, member: str) -> bool:
        _ref, _cat, month, offset = parse_member(member)
        return offset in self.bitmaps.get(month, bits.Bits())

    def is_read(self, i: int) -> bool:
        return self.member_read(self.members[i])

    def keep(self, i: int) -> bool:
        if self.unread_only and self.is_read(i):
            return False
        if self.text is None:
            return True
        raw = self.details[i]
        return raw is not None and listing.matches(_detail(raw), self.text, self.language)


def inbox_listing(
    *,
    user_id: int,
    now_ms: int,
    category: str | None,
    max_score: int | None,
    skip: int,
    limit: int,
    unread_only: bool,
    since_ms: int | None,
    archived: bool = False,
    query: str | None = None,
    language: str | None = None,
) -> Page:
    """A page of the archived list and/or of a text search (``query``), with
    the whole inbox's counts; the walk and cursor are page.lua's
    (``listing.walk``). The inbox is settled first (the counts script), then
    the listing is read in growing batches, each one round trip for its
    members (and the user's read bitmaps, once) and one for their details
    when searching, until the page is full: the match is Python's casefold,
    in any language."""
    counts = _counts(_read(user_id, now_ms, CountsOp()))
    client = get_redis()
    walk = _ListingWalk(
        client=client,
        user_id=user_id,
        key=_listing_key(user_id=user_id, category=category, unread_only=unread_only, archived=archived),
        top="+inf" if max_score is None else max_score,
        bottom="-inf" if since_ms is None else f"({since_ms}",
        # The months the settling read above left as the hint.
        months=months_hints.get(user_id, ()),
        category=category,
        archived=archived,
        unread_only=unread_only,
        skip=skip,
        text=listing.needle(query),
        language=language,
    )
    walked = listing.walk(walk.batches(), max_score=max_score, skip=skip, limit=limit, keep=walk.keep)
    refs = [walk.members[i].split("|", 1)[0] for i in walked.picked]
    if walk.text is not None:
        raws = [walk.details[i] for i in walked.picked]
    else:
        raws = client.hmget(mc_keys.item_detail(), refs) if refs else []
    page_rows = [
        PageRow(ref=ref, score=walk.scores[i], read=walk.is_read(i), detail=_detail(raw))
        for ref, i, raw in zip(refs, walked.picked, raws, strict=True)
        if raw is not None  # removed a moment ago; the next read settles it
    ]
    return Page(rows=page_rows, next_position=walked.next_position, counts=counts)


def page_cache_put(*, user_id: int, field: str, tag: tuple[str, str], body: bytes) -> None:
    """Keep a computed page's rendering for the next identical read (see _cache.lua).
    A write racing a change is harmless: its tag is already out of date."""
    pipe = get_redis().pipeline(transaction=False)  # any client: fakeredis, a cluster (one slot)
    for command in _page_cache_put_commands(user_id, field, tag, body):
        pipe.execute_command(*command)
    pipe.execute()
    _cache_hint_add(user_id, field)


def _page_cache_put_commands(user_id: int, field: str, tag: tuple[str, str], body: bytes) -> list[tuple[Any, ...]]:
    pages = mc_keys.inbox_pages(user_id)
    return [("HSET", pages, field, body, f"{field}#", readcache.held_tag(*tag)), ("EXPIRE", pages, PAGE_CACHE_SECONDS)]


# The read cache's field of the counts (counts.lua keeps them there itself).
COUNTS_FIELD = "counts"

# (user id, field) of what this process stored in the read cache or was
# served from it lately: only those are checked without the script first (a
# poll), so what is not cached costs one round trip (the script), not two.
# Only a hint, like the months hints.
cache_hints: LocalCache[tuple[int, str], bool] = LocalCache("read cache hints", maxsize=100_000)


def _cache_hint_add(user_id: int, field: str) -> None:
    cache_hints[(user_id, field)] = True


def _cache_checkable(user_id: int, field: str) -> bool:
    # Single Redis only: the values the check reads live in two cluster slots.
    return (user_id, field) in cache_hints and not is_cluster()


@lru_cache(maxsize=8192)
def _cache_check_commands(_prefix: str, user_id: int, field: str) -> tuple[tuple[str, ...], ...]:
    """readcache's check commands, built once per (prefix, user, field)."""
    return readcache.check_commands(user_id, field)


def _cache_checked(user_id: int, field: str, exec_reply: list[Any], now_ms: int) -> tuple[bytes, float] | None:
    """The value the check's EXEC read, if still current, with the time it
    stops being so (readcache.checked: the rule _cache.lua follows too)."""
    checked = readcache.checked(exec_reply, now_ms)
    if isinstance(checked, readcache.Missing):
        cache_hints.pop((user_id, field))
        return None
    return checked


def cache_get(*, user_id: int, field: str, now_ms: int) -> bytes | None:
    """What the read cache holds under ``field`` (a polled first page's
    rendering, the counts), if it is still current, checked without a script:
    the script costs Redis ~10x the CPU of the three plain reads that tell the
    same. None when this process holds no hint of it (the script then checks
    and computes in one round trip) or it is stale."""
    if not _cache_checkable(user_id, field):
        return None
    replies = round_trip(get_redis(), _cache_check_commands(keys.prefix(), user_id, field))
    checked = _cache_checked(user_id, field, replies[-1], now_ms)
    return checked[0] if checked is not None else None


def _cached_counts(value: bytes) -> Counts:
    """Counts as counts.lua keeps them: ``<name>,<n>,...|<unseen>``."""
    flat, _, unseen = value.rpartition(b"|")
    return _counts([flat.split(b",") if flat else [], unseen])


def _counts_computed(user_id: int, now_ms: int) -> Counts:
    """The counts from the script (which keeps them in the read cache on the fast path)."""
    result, kept = _answer(user_id, now_ms, CountsOp(cache_seconds=PAGE_CACHE_SECONDS), planned=CountsOp())
    if kept:
        _cache_hint_add(user_id, COUNTS_FIELD)
    return _counts(result)


def inbox_counts(*, user_id: int, now_ms: int) -> Counts:
    cached = cache_get(user_id=user_id, field=COUNTS_FIELD, now_ms=now_ms)
    return _cached_counts(cached) if cached is not None else _counts_computed(user_id, now_ms)


def inbox_settle(*, user_ids: Sequence[int], now_ms: int) -> None:
    """Settle these users' inboxes as their next read would (expired and
    removed members leave, counters kept exact, pending merges done), so
    that none of them still names an item about to be purged."""
    for user_id in user_ids:
        _run(user_id, now_ms, CountsOp(), _plan(user_id, now_ms))  # settle and merge only


def inbox_counts_alongside(
    *, user_id: int, now_ms: int, script: LuaScript, script_keys: Sequence[str], script_args: Sequence[Any]
) -> tuple[Counts, Any] | None:
    """The counts and another script's reply (unsettled: pass it to the
    script's ``settle``) in one round trip on a single Redis: the read cache's
    check and the other script when the counts are cached (a poll), else the
    fast counts script and the other one, pipelined. None when that cannot
    apply (a cluster, no months hint); when the inbox needed settling after
    all, its counts take the planned route and the other reply is still returned."""
    client = get_redis()
    if _cache_checkable(user_id, COUNTS_FIELD):
        check = _cache_check_commands(keys.prefix(), user_id, COUNTS_FIELD)
        commands = [*check, script.command(script_keys, script_args, client=client)]
        try:
            replies = round_trip(client, commands)
        except NoScriptError:
            replies = None  # nothing ran but reads: the pipeline below loads the script
        if replies is not None:
            checked = _cache_checked(user_id, COUNTS_FIELD, replies[-2], now_ms)
            if checked is None:
                return _counts_computed(user_id, now_ms), replies[-1]
            return _cached_counts(checked[0]), replies[-1]
    call = _fast_call(user_id, now_ms, CountsOp(cache_seconds=PAGE_CACHE_SECONDS))
    if call is None:
        return None
    pipe = client.pipeline(transaction=False)
    call.queue(pipe)
    script.queue(pipe, script_keys, script_args)
    inbox_reply, other = pipe.execute(raise_on_error=False)
    result = call.settle(inbox_reply)
    if _unanswered(result):
        result = _run(user_id, now_ms, CountsOp(), _plan(user_id, now_ms))
    else:
        _cache_hint_add(user_id, COUNTS_FIELD)
    return _counts(result), other


# Where an item of the inbox is: in the list, archived, or snoozed (away until its wake time).
LIVE, ARCHIVED, SNOOZED = "live", "archived", "snoozed"


@dataclass(frozen=True)
class Placed:
    """An item of the user's inbox and where it is (``row.score``: its time in
    the list or the archive, or its wake time when snoozed)."""

    place: str
    row: PageRow


def inbox_place(*, user_id: int, ref: str, now_ms: int) -> Placed | None:
    """The item wherever it is in this user's inbox, else None (never tells why).

    One round trip when the user is settled (the script reads the detail
    itself); else the plan reads the detail with the markers, then the script."""
    result = _fast(user_id, now_ms, GetOp(member="", ref=ref))
    if result is not None:
        detail = _detail(result[3]) if result else None
    else:
        plan = _plan(user_id, now_ms, ref)
        detail = plan.detail
        if detail is None:
            _run(user_id, now_ms, CountsOp(), plan)  # settle and merge only
            return None
        result = _run(user_id, now_ms, GetOp(member=detail["member"]), plan)
    if not result or detail is None:
        return None
    score, read, place, _ = result
    return Placed(place.decode(), PageRow(ref=ref, score=_int(score), read=bool(int(read)), detail=detail))


def inbox_get(*, user_id: int, ref: str, now_ms: int) -> PageRow | None:
    """The item if it is live or archived in this user's inbox, else None (never tells why)."""
    placed = inbox_place(user_id=user_id, ref=ref, now_ms=now_ms)
    return placed.row if placed is not None and placed.place != SNOOZED else None


_PLACE_OPS = {LIVE: UnarchiveOp, ARCHIVED: ArchiveOp, SNOOZED: SnoozeOp}


def _run_batch(user_id: int, now_ms: int, ops: Sequence[InboxOp], plan: _Plan) -> list[Any]:
    """Several ops of one user in one pipeline: the first settles and merges
    as planned, the others run as they are (nothing is left to settle)."""
    months = _hinted(user_id, plan)
    calls = [
        inbox_call(op, user_id=user_id, now_ms=now_ms, months=months, mode=plan.merge if i == 0 else None)
        for i, op in enumerate(ops)
    ]
    replies = run_inbox_calls(calls)
    if replies and replies[0] == AGAIN:
        # The first op found more to settle than one call does: settle, then run it.
        replies[0] = _settled(user_id, now_ms, ops[0], months, replies[0])
    return replies


def inbox_items_place(*, user_id: int, places: Sequence[tuple[InboxEntry, str, int]], now_ms: int) -> int:
    """Put each item (entry, place, score) where PostgreSQL says it is: in the
    list at ``score``, archived at ``score``, or snoozed until ``score`` (the
    projection's one write; idempotent), the user's items in one pipeline.
    Returns how many are in this inbox."""
    if not places:
        return 0
    plan = _plan(user_id, now_ms)
    plan.months.update(str(entry.month) for entry, _place, _score in places)
    ops = [
        _PLACE_OPS[place](member=entry.member, score=score, expire_ms=entry.expire_ms) for entry, place, score in places
    ]
    done = [bool(int(reply)) for reply in _run_batch(user_id, now_ms, ops, plan)]
    if any(done):
        live.inbox_changed(user_ids=[user_id], reason="place")
    return sum(done)


def inbox_places(*, user_id: int, refs: Sequence[str], now_ms: int) -> dict[str, str]:
    """ref -> where it is (live, archived, snoozed) for the refs in this
    user's inbox: one detail lookup, the plan, then one pipeline."""
    members = inbox_members(refs=refs)
    plan = _plan(user_id, now_ms)
    if not members:
        _run(user_id, now_ms, CountsOp(), plan)  # settle and merge only
        return {}
    plan.months.update(parse_member(m)[2] for m in members.values())
    replies = _run_batch(user_id, now_ms, [GetOp(member=m) for m in members.values()], plan)
    return {ref: reply[2].decode() for ref, reply in zip(members, replies, strict=True) if reply}


def inbox_hide_many(*, user_id: int, members: Sequence[str], now_ms: int) -> int:
    """hide.lua for each member, in one pipeline; returns how many were in the inbox."""
    if not members:
        return 0
    plan = _plan(user_id, now_ms)
    plan.months.update(parse_member(m)[2] for m in members)
    done = sum(int(r) for r in _run_batch(user_id, now_ms, [HideOp(member=m) for m in members], plan))
    if done:
        live.inbox_changed(user_ids=[user_id], reason="hide")
    return done


def inbox_members(*, refs: Sequence[str]) -> dict[str, str]:
    """ref -> member of the items among ``refs`` that still have a detail (one HMGET)."""
    if not refs:
        return {}
    raws = get_redis().hmget(mc_keys.item_detail(), list(refs))
    return {ref: _detail(raw)["member"] for ref, raw in zip(refs, raws, strict=True) if raw is not None}


def inbox_mark_many(*, user_id: int, members: Sequence[str], read: bool, now_ms: int) -> int:
    """Mark many live or archived items read or unread in one script call; returns how many."""
    if not members:
        return 0
    plan = _plan(user_id, now_ms)
    plan.months.update(parse_member(m)[2] for m in members)
    done, first = _run(user_id, now_ms, BulkMarkOp(members=tuple(members), read=read), plan)
    if int(done):
        record_reads(user_id=user_id, first_refs=[r.decode() for r in first], now_ms=now_ms)
        live.inbox_changed(user_ids=[user_id], reason="read" if read else "unread")
    return int(done)


def _fast_told(user_id: int, now_ms: int, op: InboxOp, *, reason: str) -> Any | None:
    """A write op in one round trip on a single Redis when the user is settled:
    the script and the live update go in one pipeline (the open pages are told
    before the script's answer is known: a version bumped for nothing costs a
    refresh, no more). None when the fast path does not apply or did not
    answer; the caller then plans."""
    call = _fast_call(user_id, now_ms, op)
    if call is None:
        return None
    live_calls = live.changed_calls(user_ids=[user_id], reason=reason)
    pipe = get_redis().pipeline(transaction=False)
    call.queue(pipe)
    for live_keys, live_args in live_calls:
        live.SCRIPT.queue(pipe, live_keys, live_args)
    replies = pipe.execute(raise_on_error=False)
    for (live_keys, live_args), reply in zip(live_calls, replies[-len(live_calls) :], strict=True):
        try:
            live.SCRIPT.settle(reply, live_keys, live_args)
        except RedisError:
            logger.warning("live update for user %s not published", user_id, exc_info=True)
    result = call.settle(replies[0])
    return None if _unanswered(result) else result


def inbox_set_read(*, user_id: int, ref: str, read: bool, now_ms: int, member: str | None = None) -> bool:
    """Mark the item read or unread. ``member``: the item's member when the
    caller knows it (a mark looked the item up first): the one-round-trip
    path then applies when nothing waits to be settled or merged."""
    if member is not None:
        op = MarkOp(member=member, read=read, hour=hour_of(now_ms))
        fast = _fast_told(user_id, now_ms, op, reason=_mark_reason(read))
        if fast is not None:
            return bool(int(fast))  # a fast-path call recorded a first read itself
    plan = _plan(user_id, now_ms, ref)
    if plan.detail is None:
        return False
    op = MarkOp(member=plan.detail["member"], read=read, hour=hour_of(now_ms))
    result = int(_run(user_id, now_ms, op, plan))
    if result:
        # 2: the user's first read of the item (counted in the same round trip;
        # a fast-path call queued it itself and answered 1).
        record_reads(user_id=user_id, first_refs=[ref] if result == 2 else [], now_ms=now_ms)
        live.inbox_changed(user_ids=[user_id], reason=_mark_reason(read))
    return bool(result)


def _mark_reason(read: bool) -> str:
    return "read" if read else "unread"


def inbox_hide(*, user_id: int, ref: str, now_ms: int) -> bool:
    plan = _plan(user_id, now_ms, ref)
    if plan.detail is None:
        return False
    done = bool(_run(user_id, now_ms, HideOp(member=plan.detail["member"]), plan))
    if done:
        live.inbox_changed(user_ids=[user_id], reason="hide")
    return done


def inbox_read_all(*, user_id: int, category: str | None, now_ms: int, max_score: int | None = None) -> int:
    """Mark every live item (of the category) read; with ``max_score`` only
    items scored at or below it (those the user saw when the mark committed).

    One round trip on a single Redis when the user is settled: the script (it
    queues the first reads itself) and the live update go in one pipeline.
    Otherwise plan, run, then count the first reads and tell.
    """
    op = ReadAllOp(category=category or "", time_max=max_score, hour=hour_of(now_ms))
    result = _fast_told(user_id, now_ms, op, reason="read_all")
    if result is not None:
        return int(result[0])
    plan = _plan(user_id, now_ms)
    marked, first, first_maps = _run(user_id, now_ms, op, plan)
    if marked:
        record_reads(
            user_id=user_id,
            first_refs=[r.decode() for r in first],
            first_maps={first_maps[i].decode(): first_maps[i + 1] for i in range(0, len(first_maps), 2)},
            now_ms=now_ms,
        )
        live.inbox_changed(user_ids=[user_id], reason="read_all")
    return int(marked)


def inbox_seen(*, user_id: int, now_ms: int) -> None:
    _run(user_id, now_ms, SeenOp(), _plan(user_id, now_ms))
    live.inbox_changed(user_ids=[user_id], reason="seen")


def inbox_unread_members(*, user_id: int, category: str | None, now_ms: int) -> list[str]:
    """Members of the live unread items (of the category) placed at or before
    ``now_ms``: what a "read all" now would mark (settled and merged first).

    One round trip on a single Redis when the user is settled: the fast
    path's settling script and the range in one pipeline (the range runs
    after the script; its answer is used only if the script answered)."""
    key = mc_keys.inbox_unread(user_id, category or "")
    call = _fast_call(user_id, now_ms, CountsOp())
    if call is not None:
        pipe = get_redis().pipeline(transaction=False)
        call.queue(pipe)
        pipe.zrangebyscore(key, "-inf", now_ms)
        settled, members = pipe.execute(raise_on_error=False)
        # An error (a script Redis no longer holds) leaves the range unsettled: plan.
        if not isinstance(settled, Exception) and not _unanswered(call.settle(settled)):
            if isinstance(members, Exception):
                raise members
            return [m.decode() for m in members]
    _run(user_id, now_ms, CountsOp(), _plan(user_id, now_ms))
    return [m.decode() for m in get_redis().zrangebyscore(key, "-inf", now_ms)]
