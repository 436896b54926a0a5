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

from core import keys, live
from core.insight import hour_of
from core.lua import LuaScript
from core.redis import get_redis, is_cluster, round_trip
from messagecenter.mutes import Mutes
from messagecenter.readmodel import bits, grouping, listing, readcache
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
from messagecenter.readmodel.snapshots import dirty_members, record_seen

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


def _bulletin_configs(
    pipe: Any, *, full: bool, access: int, update_time: int, shown: int, latest_display: int, now_ms: int
) -> int:
    """Queue the reads of the bulletin configs a merge must look at; returns how many replies.

    The full merge reads every config already displayed. Otherwise only what
    changed for this user: the change log above their access time (configs
    created or edited since, whatever their display time) and the configs
    whose display time came since the last merge ("bd" is the latest display
    time then passed, so nothing displayed in (bd, then] existed that was not
    taken in; a config added there later is in the log as well).
    """
    if full:
        pipe.zrangebyscore(keys.mc_bulletin_config(), "-inf", now_ms)
        return 1
    queued = 0
    if update_time > access:
        pipe.zrangebyscore(keys.mc_bulletin_changes(), f"({access}", update_time)
        queued += 1
    if latest_display > shown:
        pipe.zrangebyscore(keys.mc_bulletin_config(), f"({shown}", now_ms)
        queued += 1
    return queued


def _plan(user_id: int, now_ms: int, ref: str | None = None) -> _Plan:
    client = get_redis()
    pipe = client.pipeline(transaction=False)
    pipe.smembers(keys.mc_inbox_months(user_id))
    pipe.hgetall(keys.mc_inbox_state(user_id))
    pipe.get(keys.mc_bulletin_access_time(user_id))
    pipe.smembers(keys.mc_user_groups(user_id))
    # The bulletin marker before the removal version: an edit moves both in
    # one script, and a read that saw the new marker with the old version
    # would merge the edited bulletin while its old member still stands (NX:
    # nothing changes), then settle the edit's removal with nothing left to merge.
    pipe.get(keys.mc_bulletin_update_time())
    pipe.get(keys.mc_removed_version())
    pipe.get(keys.mc_pull_sequence())
    pipe.zrevrangebyscore(keys.mc_bulletin_config(), now_ms, "-inf", start=0, num=1, withscores=True)
    pipe.get(keys.mc_removed_floor())
    pipe.get(keys.mc_bulletin_changes_floor())
    pipe.get(keys.mc_user_mutes(user_id))
    if ref is not None:
        pipe.hget(keys.mc_item_detail(), ref)
    results = pipe.execute()
    months_raw, state_raw, access_raw, groups_raw, update_raw, version_raw, seq_raw, latest, floor_raw = results[:9]
    changes_floor_raw = results[9]
    mutes = Mutes.loads(results[10])
    plan = _Plan(months={m.decode() for m in months_raw})
    if ref is not None and results[11] is not None:
        plan.detail = json.loads(results[11])
        plan.months.add(parse_member(plan.detail["member"])[2])

    state = {k.decode(): v for k, v in state_raw.items()}
    settled, version = _int(state.get("settled")), _int(version_raw)
    pull_wm, seq = _int(state.get("pull")), _int(seq_raw)
    update_time = _int(update_raw)
    latest_display = _int(latest[0][1]) if latest else 0
    # "bd" (bulletin display): display time of the latest bulletin merged into this inbox.
    bulletins_shown = state.get("bd")
    # Removals below the floor were trimmed: such a user re-checks every
    # item against the details (removed items have none) and re-merges
    # bulletins (an edited one may have moved).
    full_settle = version > settled and settled < _int(floor_raw)
    merge_bulletins = (
        full_settle
        or access_raw is None
        or bulletins_shown is None
        or update_time > _int(access_raw)
        or latest_display > _int(bulletins_shown)
    )
    # Every live bulletin once: nothing merged yet (new user, groups changed),
    # removals trimmed, or changes the log does not hold (its floor is above
    # the user's access time, or it has none yet).
    full_bulletins = (
        full_settle
        or access_raw is None
        or bulletins_shown is None
        or changes_floor_raw is None
        or _int(access_raw) < _int(changes_floor_raw)
    )

    removed: list[str] = []
    candidates: list[tuple[str, int, int]] = []
    grouped: set[str] = set()  # pulled members sent with a group key (publish.PULL_GROUPED)
    arrivals: dict[str, int] = {}  # member -> time on the mute rule's axis, where not its score
    if version > settled or seq > pull_wm or merge_bulletins:
        pipe = client.pipeline(transaction=False)
        if full_settle:
            pipe.zrange(keys.mc_inbox(user_id), 0, -1)
        elif version > settled:
            pipe.zrangebyscore(keys.mc_removed(), f"({settled}", version)
        if seq > pull_wm:
            pipe.zrangebyscore(keys.mc_pull(), f"({pull_wm}", seq)
        config_replies = 0
        if merge_bulletins:
            config_replies = _bulletin_configs(
                pipe,
                full=full_bulletins,
                access=_int(access_raw),
                update_time=update_time,
                shown=_int(bulletins_shown),
                latest_display=latest_display,
                now_ms=now_ms,
            )
        fetched = list(pipe.execute())
        removed = [m.decode() for m in fetched.pop(0)] if version > settled else []
        held = removed if full_settle else []  # the whole inbox, to check below
        if full_settle:
            removed = [m for m in held if m.startswith("b")]
        pulls = [m.decode() for m in fetched.pop(0)] if seq > pull_wm else []
        # A config both changed and newly due comes once.
        configs = list(dict.fromkeys(m.decode() for reply in fetched[:config_replies] for m in reply))
        plan.bulletins_read = len(configs)

        groups = {"0", *(g.decode() for g in groups_raw)}
        visible_configs = [c for c in configs if c.rsplit("_", 1)[1] in groups]
        bitmap_pulls: list[tuple[str, int, int, str]] = []
        for pull in pulls:
            # <ref>|<category>|<month>|<offset>|<score>|<expire>|<audience>
            parts = pull.split("|")
            member, score, expire, audience = "|".join(parts[:4]), int(parts[4]), int(parts[5]), parts[6]
            if parts[7:] == [PULL_GROUPED]:
                grouped.add(member)
            if expire and expire <= now_ms:
                continue
            if audience == AUDIENCE_EVERYONE:
                candidates.append((member, score, expire))
            else:
                bitmap_pulls.append((member, score, expire, parts[0]))
        held = [m for m in held if not m.startswith("b")]
        if visible_configs or bitmap_pulls or held:
            pipe = client.pipeline(transaction=False)
            if held:
                pipe.hmget(keys.mc_item_detail(), [parse_member(m)[0] for m in held])
            if visible_configs:
                pipe.hmget(keys.mc_bulletin_detail(), visible_configs)
            chunk_size = int(settings.MESSAGECENTER_BITMAP_CHUNK_USERS)
            chunk, bit = divmod(user_id, chunk_size)
            for _member, _score, _expire, pull_ref in bitmap_pulls:
                pipe.getbit(keys.mc_pull_audience(pull_ref, chunk), bit)
            fetched = list(pipe.execute())
            if held:
                for member, raw in zip(held, fetched.pop(0), strict=True):
                    if raw is None or json.loads(raw).get("member") != member:
                        removed.append(member)
            if visible_configs:
                for raw in fetched.pop(0):
                    if raw is None:
                        continue
                    config = json.loads(raw)
                    if config["expire"] and config["expire"] <= now_ms:
                        continue
                    if int(config["score"]) > now_ms:
                        continue  # changed but not displayed yet: merged when its display time comes
                    candidates.append((config["member"], int(config["score"]), int(config["expire"])))
                    # A bulletin arrives when it is created or when it may first show, whichever is later.
                    arrivals[config["member"]] = max(int(config["score"]), int(config.get("arrived", 0)))
            for (member, score, expire, _ref), hit in zip(bitmap_pulls, fetched, strict=True):
                if hit:
                    candidates.append((member, score, expire))

    if not mutes.empty:
        # Items that arrived while the user muted their category never merge (messagecenter.mutes).
        candidates = [
            c for c in candidates if not mutes.hides(category=parse_member(c[0])[1], time_ms=arrivals.get(c[0], c[1]))
        ]
    if grouped and candidates:  # grouped broadcasts join their groups first (readmodel.grouping)
        candidates = grouping.merge_candidates(user_id=user_id, candidates=candidates, grouped=grouped)
    for member, _score, _expire in candidates:
        plan.months.add(parse_member(member)[2])
    plan.merge = Merge(
        settled_version=version if version > settled else None,
        removals=removed,
        candidates=candidates,
        access=update_time if merge_bulletins else None,
        display=latest_display if merge_bulletins else None,
        pull=seq if seq > pull_wm else None,
        max_items=int(settings.MESSAGECENTER_INBOX_MAX_ITEMS),
        step=_settle_step(),
    )
    return plan


# user id -> months (``yyyymm``) of the user's bitmaps, as last planned: the
# fast path passes those bitmaps. Only a hint (the script checks it), so a
# plain bounded dict shared by threads is enough.
_months_hint: dict[int, tuple[str, ...]] = {}
MONTHS_HINT_USERS = 100_000
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


def _hinted(user_id: int, plan: _Plan) -> list[str]:
    """The plan's months, sorted, kept as the user's months hint."""
    months = sorted(plan.months)
    if len(_months_hint) >= MONTHS_HINT_USERS:
        _months_hint.clear()
    _months_hint[user_id] = tuple(months)
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
    months = _months_hint.get(user_id)
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
    return _run(user_id, now_ms, planned or op, plan), False


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


@dataclass(frozen=True)
class Page:
    rows: list[PageRow]
    next_position: tuple[int, int] | None  # (max score, items at it already returned)
    counts: Counts
    cache_tag: tuple[str, str] | None = None  # (tag, valid until ms) to store a rendering under
    groups_read: bool = field(default=False, compare=False)  # the rows carry their groups (the fast path)


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
    # axis: item scores are their times in ms (core.keys.mc_inbox).
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
    """A page from page.lua's reply (the planned path's reply carries no
    details: they are read here)."""
    members, scores, reads, position, counts, *fetched = result
    refs = [m.decode().split("|", 1)[0] for m in members]
    details: list[Any] = fetched[0] if fetched else get_redis().hmget(keys.mc_item_detail(), refs) if refs else []
    cache = fetched[1] if len(fetched) > 1 and fetched[1] else None
    groups: list[Any] = fetched[2] if len(fetched) > 2 else [None] * len(refs)
    rows = []
    for ref, score, read, raw, group in zip(refs, scores, reads, details, groups, strict=True):
        if raw is None:  # removed a moment ago; the next read settles it
            continue
        rows.append(
            PageRow(
                ref=ref, score=_int(score), read=bool(int(read)), detail=_detail(raw), group=grouping.group_of(group)
            )
        )
    more, pos_score, pos_skip = position
    next_position = (_int(pos_score), int(pos_skip)) if int(more) else None
    return Page(
        rows=rows,
        next_position=next_position,
        counts=_counts(counts),
        cache_tag=(cache[0].decode(), cache[1].decode()) if cache else None,
        groups_read=len(fetched) > 2,
    )


# Items (and, for a search, their details) read per round trip while a
# listing walks: the first batch answers a page at once, later ones grow.
LISTING_BATCH_FIRST = 100
LISTING_BATCH_MAX = 2_000


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
) -> Page:
    """A page of the archived list and/or of a text search (``query``), with
    the whole inbox's counts; the walk and cursor are page.lua's
    (``listing.walk``). The inbox is settled first (the counts script), then
    the listing is read in growing batches, each one round trip for its
    members (and the user's read bitmaps, once) and one for their details
    when searching, until the page is full: the match is Python's casefold,
    in any language."""
    counts = _counts(_read(user_id, now_ms, CountsOp()))
    months = _months_hint.get(user_id, ())
    if archived:
        key = keys.mc_inbox_archived(user_id)
    elif unread_only:
        # The unread zset holds exactly the live unread items (_item.lua).
        key = keys.mc_inbox_unread(user_id, category or "")
    elif category:
        key = keys.mc_inbox_category(user_id, category)
    else:
        key = keys.mc_inbox(user_id)
    client = get_redis()
    top = "+inf" if max_score is None else max_score
    bottom = "-inf" if since_ms is None else f"({since_ms}"
    text = listing.needle(query)
    members: list[str] = []
    scores: list[int] = []
    details: list[bytes | None] = []
    bitmaps: dict[str, bits.Bits] = {}

    def batches() -> Iterator[int]:
        """The listing's scores after the cursor's position, read as the walk asks."""
        raw_offset, dropped, size = 0, 0, LISTING_BATCH_FIRST
        while True:
            pipe = client.pipeline(transaction=False)
            pipe.zrevrangebyscore(key, top, bottom, start=raw_offset, num=size, withscores=True)
            first = not bitmaps and bool(months)
            if first:
                for month in months:
                    bits.queue(pipe, keys.mc_read_bitmap(user_id, month))
            replies = iter(bits.execute(pipe))
            rows = next(replies)
            if first:
                bitmaps.update((month, bits.take(replies)) for month in months)
            raw_offset += len(rows)
            fresh = [(m.decode(), int(score)) for m, score in rows]
            if archived and category:  # one zset holds every category's archived items
                fresh = [(m, score) for m, score in fresh if parse_member(m)[1] == category]
            if unread_only:  # the walk (and so the cursor) counts unread items only, as page.lua's
                fresh = [(m, score) for m, score in fresh if not _member_read(m)]
            if dropped < skip:  # the items at the cursor's time already walked
                cut = min(skip - dropped, len(fresh))
                fresh, dropped = fresh[cut:], dropped + cut
            if text is not None and fresh:
                details.extend(client.hmget(keys.mc_item_detail(), [m.split("|", 1)[0] for m, _s in fresh]))
            for member, score in fresh:
                members.append(member)
                scores.append(score)
                yield score
            if len(rows) < size:
                return
            size = min(size * 4, LISTING_BATCH_MAX)

    def _member_read(member: str) -> bool:
        _ref, _cat, month, offset = parse_member(member)
        return offset in bitmaps.get(month, bits.Bits())

    def is_read(i: int) -> bool:
        return _member_read(members[i])

    def keep(i: int) -> bool:
        if unread_only and is_read(i):
            return False
        if text is None:
            return True
        raw = details[i]
        return raw is not None and listing.matches(_detail(raw), text)

    walked = listing.walk(batches(), max_score=max_score, skip=skip, limit=limit, keep=keep)
    refs = [members[i].split("|", 1)[0] for i in walked.picked]
    if text is not None:
        raws = [details[i] for i in walked.picked]
    else:
        raws = client.hmget(keys.mc_item_detail(), refs) if refs else []
    page_rows = [
        PageRow(ref=ref, score=scores[i], read=is_read(i), detail=_detail(raw))
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
    pages = keys.mc_inbox_pages(user_id)
    return [("HSET", pages, field, body, f"{field}#", readcache.held_tag(*tag)), ("EXPIRE", pages, PAGE_CACHE_SECONDS)]


# The read cache's field of the counts (counts.lua keeps them there itself).
COUNTS_FIELD = "counts"

# (user id, field) of what this process stored in the read cache or was
# served from it lately: only those are checked without the script first (a
# poll), so what is not cached costs one round trip (the script), not two.
# Only a hint, like _months_hint.
_cache_hint: set[tuple[int, str]] = set()
CACHE_HINT_ENTRIES = 100_000


def _cache_hint_add(user_id: int, field: str) -> None:
    if len(_cache_hint) >= CACHE_HINT_ENTRIES:
        _cache_hint.clear()
    _cache_hint.add((user_id, field))


def _cache_checkable(user_id: int, field: str) -> bool:
    # Single Redis only: the values the check reads live in two cluster slots.
    return (user_id, field) in _cache_hint and not is_cluster()


@lru_cache(maxsize=8192)
def _cache_check_commands(_prefix: str, user_id: int, field: str) -> tuple[tuple[str, ...], ...]:
    """readcache's check commands, built once per (prefix, user, field)."""
    return readcache.check_commands(user_id, field)


def _cache_checked(user_id: int, field: str, exec_reply: list[Any], now_ms: int) -> tuple[bytes, float] | None:
    """The value the check's EXEC read, if still current, with the time it
    stops being so (readcache.checked: the rule _cache.lua follows too)."""
    checked = readcache.checked(exec_reply, now_ms)
    if isinstance(checked, readcache.Missing):
        _cache_hint.discard((user_id, field))
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
    """The item wherever it is in this user's inbox, else None (never tells why)."""
    plan = _plan(user_id, now_ms, ref)
    if plan.detail is None:
        _run(user_id, now_ms, CountsOp(), plan)  # settle and merge only
        return None
    result = _run(user_id, now_ms, GetOp(member=plan.detail["member"]), plan)
    if not result:
        return None
    score, read, place = result
    return Placed(place.decode(), PageRow(ref=ref, score=_int(score), read=bool(int(read)), detail=plan.detail))


def inbox_get(*, user_id: int, ref: str, now_ms: int) -> PageRow | None:
    """The item if it is live or archived in this user's inbox, else None (never tells why)."""
    placed = inbox_place(user_id=user_id, ref=ref, now_ms=now_ms)
    return placed.row if placed is not None and placed.place != SNOOZED else None


_PLACE_OPS = {LIVE: UnarchiveOp, ARCHIVED: ArchiveOp, SNOOZED: SnoozeOp}


def _run_batch(user_id: int, now_ms: int, ops: Sequence[InboxOp], plan: _Plan) -> list[Any]:
    """Several ops of one user in one pipeline: the first settles and merges
    as planned, the others run as they are (nothing is left to settle)."""
    months = sorted(plan.months)
    _months_hint[user_id] = tuple(months)
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
    # A snooze cleared the read bit: the snapshot job copies the month.
    cleared = {entry.month for (entry, place, _s), ok in zip(places, done, strict=True) if ok and place == SNOOZED}
    if cleared:
        record_reads(user_id=user_id, months=cleared, first_refs=[], now_ms=now_ms)
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
    raws = get_redis().hmget(keys.mc_item_detail(), list(refs))
    return {ref: _detail(raw)["member"] for ref, raw in zip(refs, raws, strict=True) if raw is not None}


def inbox_mark_many(*, user_id: int, members: Sequence[str], read: bool, now_ms: int) -> int:
    """Mark many live or archived items read or unread in one script call; returns how many."""
    if not members:
        return 0
    plan = _plan(user_id, now_ms)
    months = {parse_member(m)[2] for m in members}
    plan.months.update(months)
    done, first = _run(user_id, now_ms, BulkMarkOp(members=tuple(members), read=read), plan)
    if int(done):
        record_reads(user_id=user_id, months=months, first_refs=[r.decode() for r in first], now_ms=now_ms)
        live.inbox_changed(user_ids=[user_id], reason="read" if read else "unread")
    return int(done)


def inbox_set_read(*, user_id: int, ref: str, read: bool, now_ms: int) -> bool:
    plan = _plan(user_id, now_ms, ref)
    if plan.detail is None:
        return False
    op = MarkOp(member=plan.detail["member"], read=read, hour=hour_of(now_ms))
    result = int(_run(user_id, now_ms, op, plan))
    if result:
        # 2: the user's first read of the item (counted in the same round trip;
        # a fast-path call queued it itself and answered 1).
        month = parse_member(plan.detail["member"])[2]
        record_reads(user_id=user_id, months=[month], first_refs=[ref] if result == 2 else [], now_ms=now_ms)
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
    items scored at or below it (the replay of a mark accepted while Redis was down).

    One round trip on a single Redis when the user is settled: the script (it
    queues the first reads itself), the snapshot job's dirty note and the live
    update go in one pipeline. Otherwise plan, run, then note and tell.
    """
    op = ReadAllOp(category=category or "", time_max=max_score, hour=hour_of(now_ms))
    call = _fast_call(user_id, now_ms, op)
    if call is not None:
        months = _months_hint.get(user_id, ())
        live_calls = live.changed_calls(user_ids=[user_id], reason="read_all")
        pipe = get_redis().pipeline(transaction=False)
        call.queue(pipe)
        # Noted before the script's answer is known: a month noted in vain, or
        # a version bumped for nothing, costs a re-copy or a refresh, no more.
        dirty = dirty_members(user_id=user_id, months=months)
        if dirty:
            pipe.sadd(keys.mc_snapshot_dirty(), *dirty)
        for live_keys, live_args in live_calls:
            live.SCRIPT.queue(pipe, live_keys, live_args)
        replies = pipe.execute(raise_on_error=False)
        for (live_keys, live_args), reply in zip(live_calls, replies[-len(live_calls) :], strict=True):
            try:
                live.SCRIPT.settle(reply, live_keys, live_args)
            except RedisError:
                logger.warning("live update for user %s not published", user_id, exc_info=True)
        result = call.settle(replies[0])
        if not _unanswered(result):
            return int(result[0])
    plan = _plan(user_id, now_ms)
    marked, first, first_maps = _run(user_id, now_ms, op, plan)
    if marked:
        record_reads(
            user_id=user_id,
            months=plan.months,
            first_refs=[r.decode() for r in first],
            first_maps={first_maps[i].decode(): first_maps[i + 1] for i in range(0, len(first_maps), 2)},
            now_ms=now_ms,
        )
        live.inbox_changed(user_ids=[user_id], reason="read_all")
    return int(marked)


def inbox_seen(*, user_id: int, now_ms: int) -> None:
    _run(user_id, now_ms, SeenOp(), _plan(user_id, now_ms))
    record_seen(user_id=user_id)
    live.inbox_changed(user_ids=[user_id], reason="seen")
