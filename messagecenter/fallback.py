"""The inbox computed from PostgreSQL alone: degraded reads while Redis is down.

Same answers as the Redis path (``messagecenter.readmodel.inbox``), slower:

- the user's items are the messages and notifications pushed to them, read
  as a fill reads them (``messagecenter.user_rows``: their recipient rows),
  and the live pull messages and bulletins that address them (the send-time
  audience bitmap or the everyone flag; the groups of a bulletin), which the
  Redis path merges on read; minus the refs they hid and the items that
  arrived while they muted them (``messagecenter.mutes``), newest
  ``MESSAGECENTER_INBOX_MAX_ITEMS``; order, category and bitmap slot come from
  the same ``messagecenter.items`` entries, so ties break the way Redis breaks
  them (by member) and a cursor of one path pages on in the other;
- archived and snoozed items (``InboxItemState`` rows) are kept out of the
  list and the counts: archived ones are listed apart at their place, snoozed
  ones are away until their wake time and then back at it, unread (the
  snooze cleared their read bit);
- read state is the committed one (``InboxReadMonth`` bit-sets of offsets
  per month, ``InboxSeen``): every acknowledged mark is in it;
- grouped items (a ``group_key``) are cut into groups by the user's
  ``InboxGroupEnd`` rows and collapse into their groups' rows the way
  ``lua/_group.lua`` does on delivery (``_Groups``, the one place here that
  decides it).

Every call runs a small, fixed number of queries whatever the inbox holds:
the user's own rows (their item states among them) and the items pushed to
them, two statements as the fill reads them (``messagecenter.user_rows``); pull
messages and bulletins scanned newest first, one query each, bounded by
``MESSAGECENTER_FALLBACK_SCAN_LIMIT`` rows (only the columns needed), the
audience bitmaps tested in Python; details loaded only for the rows returned.
"""

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q, QuerySet

from core.bitmaps import bitmap_deserialize
from messagecenter.items import details_of_refs
from messagecenter.models import (
    Bulletin,
    DeliveryMode,
    Message,
    MessageStatus,
)
from messagecenter.mutes import Mutes
from messagecenter.readmodel import InboxEntry, listing, to_ms
from messagecenter.readmodel.entries import CATEGORY_ORDER
from messagecenter.readmodel.inbox import ARCHIVED, LIVE, SNOOZED, Counts, Page, PageRow
from messagecenter.user_rows import RowsSeen, user_items, user_rows

logger = logging.getLogger(__name__)

# Candidate rows scanned per kind (newest first) when no setting says otherwise.
SCAN_LIMIT_DEFAULT = 5000
SCAN_PAGE = 200
MAX_REF_LENGTH = 40
_ONE_MS = timedelta(milliseconds=1)


def _scan_limit() -> int:
    return int(getattr(settings, "MESSAGECENTER_FALLBACK_SCAN_LIMIT", SCAN_LIMIT_DEFAULT))


def _scanned(rows: QuerySet[Any, Any], *, at: str, column: int) -> Iterator[Any]:
    """The rows of a newest-first scan (ordered by ``at``, then id, both
    descending; a row's id first and its ``at`` at ``column``), at most the
    scan limit, a page per query: most scans stop within their first page,
    one round trip (a server-side cursor costs three). Each page starts
    after the last row of the one before, so rows written meanwhile neither
    repeat nor hide others."""
    limit = _scan_limit()
    taken = 0
    page_rows = rows
    while taken < limit:
        page = list(page_rows[: min(SCAN_PAGE, limit - taken)])
        yield from page
        taken += len(page)
        if len(page) < SCAN_PAGE:
            return
        last_at, last_id = page[-1][column], page[-1][0]
        page_rows = rows.filter(Q(**{f"{at}__lt": last_at}) | Q(**{at: last_at, "id__lt": last_id}))


def _live(expire_ms: int, now_ms: int) -> bool:
    # The Lua script's rule, in ms: an item whose expiry has come is gone.
    return expire_ms == 0 or expire_ms > now_ms


def _sort_key(entry: InboxEntry) -> tuple[int, str]:
    # ZREVRANGEBYSCORE order: score descending, equal scores by member descending.
    return entry.score, entry.member


GROUP_ACTORS = 3


def _after(ref: str, other: str) -> bool:
    # Equal times order as the list orders them, by member: ref then "|".
    return ref + "|" > other + "|"


def _order(entry: InboxEntry) -> tuple[int, str]:
    """Oldest to newest among a key's items: time, then as the list orders equal times."""
    return entry.score, entry.ref + "|"


@dataclass(frozen=True)
class _Group:
    key: str
    members: list[InboxEntry]  # newest first; the first is the row
    ended: bool

    @property
    def row(self) -> InboxEntry:
        return self.members[0]

    @property
    def start(self) -> int:
        return min(entry.score for entry in self.members)

    def shown(self) -> dict[str, Any]:
        """The row's group as the page shows it: count and the newest three distinct actors."""
        actors: list[str] = []
        for entry in self.members:
            if entry.actor and entry.actor not in actors and len(actors) < GROUP_ACTORS:
                actors.append(entry.actor)
        return {"key": self.key, "count": len(self.members), "actors": actors}


@dataclass(frozen=True)
class _Groups:
    """The user's grouped items cut into groups, as ``lua/_group.lua`` cuts
    them: an item belongs to the first of its key's ends (time, row ref) not
    older than it (an item at exactly an end's time but sorting after that
    end's row is past it), else to the key's open group; a group's row is its
    newest item, the others are in no list. Items are the user's wherever
    they are (listed, archived, snoozed), at their own time."""

    by_row: dict[str, _Group] = field(default_factory=dict)
    by_key: dict[str, list[_Group]] = field(default_factory=dict)
    out: set[str] = field(default_factory=set)  # grouped items that are not their group's row

    @classmethod
    def of(cls, entries: Iterable[InboxEntry], ends: Mapping[str, Sequence[tuple[int, str]]]) -> "_Groups":
        """``ends``: group key -> (until ms, row ref) of the user's ended groups."""
        # The ends zset's order: time, then member ("<time>|<row ref>|").
        cuts = {
            key: sorted(times, key=lambda end: (end[0], end[1] + "|" if end[1] else "")) for key, times in ends.items()
        }
        slots: dict[tuple[str, int | None, str], list[InboxEntry]] = {}
        for entry in entries:
            if not entry.group_key:
                continue
            slot = next(
                (
                    (until, row_ref)
                    for until, row_ref in cuts.get(entry.group_key, ())
                    if until > entry.score or (until == entry.score and not (row_ref and _after(entry.ref, row_ref)))
                ),
                None,
            )
            name = (entry.group_key, *slot) if slot is not None else (entry.group_key, None, "")
            slots.setdefault(name, []).append(entry)
        groups = cls()
        for (key, end_ms, _row), members in slots.items():
            group = _Group(key=key, members=sorted(members, key=_order, reverse=True), ended=end_ms is not None)
            groups.by_row[group.row.ref] = group
            groups.by_key.setdefault(key, []).append(group)
            groups.out.update(entry.ref for entry in group.members[1:])
        return groups

    def open_group(self, key: str) -> _Group | None:
        return next((g for g in self.by_key.get(key, ()) if not g.ended), None)


def _pulled(user_id: int, now: datetime, now_ms: int, hidden: set[str], mutes: Mutes, want: int) -> list[InboxEntry]:
    """The live pull messages that address the user (everyone, or the send-time
    audience bitmap), newest first: what the Redis path merges on read."""
    found: list[InboxEntry] = []
    rows = (
        Message.objects.filter(delivery=DeliveryMode.PULL)
        .filter(status__in=[MessageStatus.DELIVERING, MessageStatus.DELIVERED])
        # A superset of the live rows (both sides truncate to ms in Redis); _live decides.
        .filter(Q(expire_at__isnull=True) | Q(expire_at__gt=now))
        # mc_message_pull_idx serves this newest-first scan.
        .order_by("-created_at", "-id")
        .values_list(
            "id",
            "category",
            "created_at",
            "expire_at",
            "everyone",
            "audience_bitmap",
            "slot_month",
            "slot_offset",
            "group_key",
            "actor",
        )
    )
    rows_seen = RowsSeen()
    for pk, category, created_at, expire_at, everyone, audience, month, offset, key, actor in _scanned(
        rows, at="created_at", column=2
    ):
        expire_ms = to_ms(expire_at) if expire_at else 0
        ref = f"m{pk}"
        if not _live(expire_ms, now_ms) or ref in hidden:
            continue
        if not everyone and user_id not in bitmap_deserialize(audience):
            continue
        if mutes.hides(category=category, time_ms=to_ms(created_at)):
            continue
        found.append(InboxEntry(ref, category, month, offset, to_ms(created_at), expire_ms, key, actor))
        if rows_seen.add(key) >= want:  # older ones cannot make the newest `want` rows
            break
    return found


def _bulletins(
    groups: list[int], now: datetime, now_ms: int, hidden: set[str], mutes: Mutes, want: int
) -> list[InboxEntry]:
    """``groups``: the ids of the user's groups."""
    found: list[InboxEntry] = []
    # A display time within the current ms counts as passed (the Redis rule is in ms).
    rows = (
        Bulletin.objects.filter(display_time__lt=now + _ONE_MS)
        .filter(Q(expire_at__isnull=True) | Q(expire_at__gt=now))
        # No groups means everyone; otherwise one of the user's groups (mc_membership_user_idx).
        .filter(Q(groups__isnull=True) | Q(groups__in=groups))
        .distinct()
        # mc_bulletin_display_idx serves this newest-first scan.
        .order_by("-display_time", "-id")
        .values_list("id", "display_time", "expire_at", "slot_month", "slot_offset", "created_at")
    )
    for pk, display_time, expire_at, month, offset, created_at in _scanned(rows, at="display_time", column=1):
        score = to_ms(display_time)
        expire_ms = to_ms(expire_at) if expire_at else 0
        ref = f"b{pk}"
        if score > now_ms or not _live(expire_ms, now_ms) or ref in hidden:
            continue
        # It arrived when created or when it may first show, whichever is later (messagecenter.mutes).
        if mutes.hides(category="system", time_ms=max(score, to_ms(created_at))):
            continue
        found.append(InboxEntry(ref, "system", month, offset, score, expire_ms))
        if len(found) >= want:
            break
    return found


@dataclass(frozen=True)
class _Inbox:
    """One user's live items (newest first) with their read state."""

    items: list[InboxEntry]
    read: set[str]
    seen_ms: int
    # Archived items newest first (score: their place), snoozed ones by ref (score: the wake time).
    archived: list[InboxEntry] = field(default_factory=list)
    snoozed: dict[str, InboxEntry] = field(default_factory=dict)
    groups: _Groups = field(default_factory=_Groups)

    def row(self, entry: InboxEntry, detail: dict[str, Any]) -> PageRow:
        group = self.groups.by_row.get(entry.ref)
        return PageRow(
            ref=entry.ref,
            score=entry.score,
            read=entry.ref in self.read,
            detail=detail,
            group=group.shown() if group is not None else None,
        )

    def place(self, ref: str) -> tuple[str, InboxEntry] | None:
        for where, entries in ((LIVE, self.items), (ARCHIVED, self.archived)):
            entry = next((e for e in entries if e.ref == ref), None)
            if entry is not None:
                return where, entry
        return (SNOOZED, self.snoozed[ref]) if ref in self.snoozed else None

    def counts(self) -> Counts:
        by_category = dict.fromkeys(CATEGORY_ORDER, 0)
        for entry in self.items:
            if entry.ref not in self.read and entry.category in by_category:
                by_category[entry.category] += 1
        # counts() in _state.lua counts unseen as ZCOUNT (seen, +inf]: strictly newer than the watermark.
        return Counts(by_category, sum(1 for entry in self.items if entry.score > self.seen_ms))


def _placed(
    candidates: Iterable[InboxEntry], places: Mapping[str, tuple[bool, int | None]], now_ms: int
) -> tuple[list[InboxEntry], list[InboxEntry], dict[str, InboxEntry]]:
    """The items listed, archived and snoozed, as their state rows say."""
    items: list[InboxEntry] = []
    archived: list[InboxEntry] = []
    snoozed: dict[str, InboxEntry] = {}
    for entry in candidates:
        if entry.ref not in places:
            items.append(entry)
            continue
        is_archived, until_ms = places[entry.ref]
        # A snooze that has woken keeps the item at its wake time.
        placed = entry._replace(score=until_ms) if until_ms is not None else entry
        if is_archived:
            archived.append(placed)
        elif until_ms is not None and placed.score > now_ms:
            snoozed[entry.ref] = placed
        else:
            items.append(placed)
    return items, archived, snoozed


def _load(user_id: int, now: datetime, keep: str | None = None) -> _Inbox:
    """``keep``: a ref just hidden that is read as if it were not."""
    now_ms = to_ms(now)
    own = user_rows(user_id)
    hidden = set(own.hidden)
    hidden.discard(keep or "")
    want = int(settings.MESSAGECENTER_INBOX_MAX_ITEMS)
    # Items that arrived while the user muted them are not theirs (messagecenter.mutes).
    mutes = own.mutes
    places = {ref: place for ref, place in own.places.items() if ref not in hidden}
    # Parked items do not count towards the list's size. The items pushed to
    # the user are the ones a fill reads, by the same statement and bound.
    pushed = user_items(user_id, now=now, want=want + len(own.parked))
    scan = want + len(places)
    candidates = [
        *pushed.kept(mutes=mutes, hidden=hidden),
        *_pulled(user_id, now, now_ms, hidden, mutes, scan),
        *_bulletins(own.group_ids, now, now_ms, hidden, mutes, scan),
    ]
    groups = _Groups.of(candidates, own.ends)
    # A newer item of its group is the row of an item in groups.out.
    items, archived, snoozed = _placed([e for e in candidates if e.ref not in groups.out], places, now_ms)
    # The Redis inbox keeps the newest MESSAGECENTER_INBOX_MAX_ITEMS.
    items = sorted(items, key=_sort_key, reverse=True)[:want]
    archived.sort(key=_sort_key, reverse=True)
    bits = {month: bitmap_deserialize(read) for month, (read, _ever) in own.months.items()}
    read = {entry.ref for entry in (*items, *archived) if entry.offset in bits.get(entry.month, ())}
    return _Inbox(items=items, read=read, seen_ms=own.seen_ms or 0, archived=archived, snoozed=snoozed, groups=groups)


def _valid_ref(ref: str) -> bool:
    return 1 < len(ref) <= MAX_REF_LENGTH and ref[0] in "mbn" and ref[1:].isdigit()


def _walkable(
    entries: Sequence[InboxEntry],
    *,
    read: set[str],
    category: str | None,
    max_score: int | None,
    since_ms: int | None,
    unread_only: bool,
) -> list[InboxEntry]:
    """The entries a page walks, in their order: the category's, at most
    ``max_score``, newer than ``since_ms``, and unread ones only when asked
    (as page.lua ranges over the unread zset then)."""
    return [
        entry
        for entry in entries
        if (not category or entry.category == category)
        and (max_score is None or entry.score <= max_score)
        and (since_ms is None or entry.score > since_ms)
        and not (unread_only and entry.ref in read)
    ]


def _search_keep(
    entries: Sequence[InboxEntry], *, text: str | None, found: dict[str, dict[str, Any]], language: str | None
) -> Callable[[int], bool]:
    """Whether the walk keeps the i-th entry: every one without a search, else
    those whose detail matches it."""

    def keep(i: int) -> bool:
        entry = entries[i]
        return text is None or (entry.ref in found and listing.matches(found[entry.ref], text, language))

    return keep


def inbox_page(
    *,
    user_id: int,
    now: datetime,
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
    """A page as ``readmodel.inbox.inbox_page`` (``inbox_listing`` for the
    archived list or a search) returns it, from PostgreSQL.

    The walk is the script's (max score plus offset, ``listing.walk``): items
    with score <= max, the first ``skip`` of them dropped, newest first; the
    position counts every item walked, so a cursor means the same in both
    paths. An unread-only page walks the unread items only (page.lua ranges
    over the unread zset), so its position counts unread items.
    """
    state = _load(user_id, now)
    entries = _walkable(
        state.archived if archived else state.items,
        read=state.read,
        category=category,
        max_score=max_score,
        since_ms=since_ms,
        unread_only=unread_only,
    )
    entries = entries[skip:]  # the items at the cursor's time already walked
    text = listing.needle(query)
    # A search reads every candidate's detail (a degraded path: slow is fine).
    found = details_of_refs(entry.ref for entry in entries) if text is not None else {}
    keep = _search_keep(entries, text=text, found=found, language=language)
    walked = listing.walk([e.score for e in entries], max_score=max_score, skip=skip, limit=limit, keep=keep)
    picked = [entries[i] for i in walked.picked]
    details = found or details_of_refs(entry.ref for entry in picked)
    rows = [state.row(entry, details[entry.ref]) for entry in picked if entry.ref in details]
    return Page(rows=rows, next_position=walked.next_position, counts=state.counts())


def inbox_counts(*, user_id: int, now: datetime) -> Counts:
    return _load(user_id, now).counts()


def inbox_place(*, user_id: int, ref: str, now: datetime) -> tuple[str, InboxEntry] | None:
    """Where ``ref`` is in this user's inbox (live, archived, snoozed) with its
    entry (score: its place, or the wake time), else None (never tells why)."""
    if not _valid_ref(ref):
        return None
    return _load(user_id, now).place(ref)


def inbox_places(*, user_id: int, refs: Iterable[str], now: datetime) -> dict[str, str]:
    """ref -> where it is (live, archived, snoozed) for the refs in this user's inbox."""
    state = _load(user_id, now)
    found = {ref: placed[0] for ref in refs if _valid_ref(ref) and (placed := state.place(ref)) is not None}
    return found


def inbox_get(*, user_id: int, ref: str, now: datetime) -> PageRow | None:
    """The item if it is live or archived in this user's inbox, else None (never tells why)."""
    if not _valid_ref(ref):
        return None
    state = _load(user_id, now)
    placed = state.place(ref)
    if placed is None or placed[0] == SNOOZED:
        return None
    detail = details_of_refs([ref]).get(ref)
    if detail is None:
        return None
    return state.row(placed[1], detail)


def inbox_item_live(*, user_id: int, ref: str, now: datetime) -> bool:
    """Is ``ref`` a live or archived item of this user's inbox (what a mark may touch)?"""
    placed = inbox_place(user_id=user_id, ref=ref, now=now)
    return placed is not None and placed[0] != SNOOZED


def inbox_unread_entries(*, user_id: int, category: str | None, now: datetime) -> list[InboxEntry]:
    """The live unread items (of the category), newest first: what a "read all" now marks."""
    state = _load(user_id, now)
    return [
        entry
        for entry in state.items
        if entry.ref not in state.read and entry.score <= to_ms(now) and (not category or entry.category == category)
    ]


def inbox_group_page(
    *, user_id: int, group_key: str, now: datetime, max_score: int | None, skip: int, limit: int
) -> tuple[list[PageRow], tuple[int, int] | None]:
    """A page of ``group_key``'s items (``group_selectors.inbox_group_list``),
    as ``readmodel.grouping.group_items`` reads it: every item of the key
    the user has (each group's, wherever its row is), newest first at their
    own times, those of the key's open group unread (from its first item's
    time on), the others read; and the position of the next page."""
    state = _load(user_id, now)
    groups = state.groups.by_key.get(group_key, [])
    members = sorted(
        (entry for group in groups for entry in group.members), key=lambda e: (e.score, e.member), reverse=True
    )
    walked = [e for e in members if max_score is None or e.score <= max_score][skip:]
    picked, more = walked[:limit], len(walked) > limit
    opened = state.groups.open_group(group_key)
    details = details_of_refs(entry.ref for entry in picked)
    rows = [
        PageRow(
            ref=entry.ref,
            score=entry.score,
            read=not (opened is not None and entry.score >= opened.start),
            detail=details[entry.ref],
        )
        for entry in picked
        if entry.ref in details
    ]
    position = None
    if more and picked:
        last = picked[-1].score
        at_last = sum(1 for entry in picked if entry.score == last)
        position = (last, at_last + (skip if max_score == last else 0))
    return rows, position


def group_of_row(
    *, user_id: int, ref: str, now: datetime, deleted: bool = False
) -> tuple[str, int, list[str], bool] | None:
    """When ``ref`` is a group's row in this user's inbox: its key, the row's
    own time (where an open group ends), the group's items newest first and
    whether it ended already (a read, archive, snooze or delete of the row
    ends it; Redis is down, so PostgreSQL decides as group_close.lua would).
    ``deleted``: the row was just deleted (hidden), read it as it was."""
    if not _valid_ref(ref):
        return None
    group = _load(user_id, now, keep=ref if deleted else None).groups.by_row.get(ref)
    if group is None:
        return None
    return group.key, group.row.score, [entry.ref for entry in group.members], group.ended


def groups_open(*, user_id: int, category: str | None, now: datetime) -> list[tuple[str, int, str]]:
    """The user's open groups (of the category) as (key, row's time, row ref):
    what a "read all" ends."""
    groups = _load(user_id, now).groups
    return [
        (group.key, group.row.score, group.row.ref)
        for found in groups.by_key.values()
        for group in found
        if not group.ended and (not category or group.row.category == category)
    ]
