"""Caps on write and unread pages in O(page), on the Redis path.

- A fan-out keeps an inbox at the cap as items arrive (the oldest leave, a
  bounded number per insert); an inbox far over the cap (written before caps
  were kept on write) and a pile of expired items are settled over several
  bounded script calls, and no answer ever shows or counts what should be gone.
- The unread zsets hold exactly the live members whose read bit is 0 (one for
  all, one per category), the counters equal their sizes, and an unread-only
  page is a range of them (it never walks read items).
"""

import json
from datetime import timedelta
from itertools import pairwise
from typing import Any

import pytest

from messagecenter import fallback, services
from messagecenter import keys as mc_keys
from messagecenter.readmodel import InboxEntry, inbox, publish, scripts, to_ms
from messagecenter.readmodel import grouping as readmodel_grouping
from messagecenter.readmodel.entries import CATEGORY_ORDER, parse_member
from messagecenter.readmodel.inbox import AGAIN, Page
from tests.factories import UserFactory
from tests.messagecenter.conftest import send, whole_inbox
from tests.messagecenter.test_inbox_property import walk

pytestmark = pytest.mark.django_db(transaction=True)

MONTH = 202611
T0 = 1_795_000_000_000  # ms, in November 2026
# What placing an arrival counts for in a call's step (_arrivals.lua).
ARRIVAL_COST = 1


def _entry(i: int, *, category: str = "system", expire_ms: int = 0, score: int | None = None) -> InboxEntry:
    return InboxEntry(
        ref=f"m{100_000 + i}",
        category=category,
        month=MONTH,
        offset=i,
        score=T0 + i if score is None else score,
        expire_ms=expire_ms,
    )


def _deliver(entry: InboxEntry, *user_ids: int, now_ms: int = T0) -> int:
    publish.item_detail_put(ref=entry.ref, detail={"member": entry.member, "category": entry.category})
    return publish.inbox_deliver(entry=entry, user_ids=list(user_ids), now_ms=now_ms)


def _page(user_id: int, now_ms: int, **query: Any) -> Page:
    page = inbox.inbox_page(user_id=user_id, now_ms=now_ms, **{**whole_inbox(20), **query})
    assert isinstance(page, Page)
    return page


def _text(values: Any) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else str(v) for v in values]


def assert_unread_index(redis: Any, user_id: int) -> None:
    """The unread zsets hold exactly the live members whose read bit is 0, with
    their scores, and every counter equals its zset's size."""
    everything = {m.decode(): s for m, s in redis.zrange(mc_keys.inbox(user_id), 0, -1, withscores=True)}
    bitmaps: dict[str, bytes | None] = {}
    want_all: dict[str, float] = {}
    counters = {k.decode(): int(v) for k, v in redis.hgetall(mc_keys.inbox_counters(user_id)).items()}
    for category in CATEGORY_ORDER:
        members = {
            m.decode(): s for m, s in redis.zrange(mc_keys.inbox_category(user_id, category), 0, -1, withscores=True)
        }
        assert set(members) <= set(everything)
        want = {}
        for member, score in members.items():
            _ref, _cat, month, offset = parse_member(member)
            if month not in bitmaps:
                bitmaps[month] = redis.get(mc_keys.read_bitmap(user_id, month))
            raw = bitmaps[month]
            byte = offset >> 3
            # bool(raw) rules None out first.
            read = bool(raw) and byte < len(raw) and bool((raw[byte] >> (7 - (offset & 7))) & 1)  # type: ignore[arg-type, index]
            if not read:
                want[member] = score
        have = {m.decode(): s for m, s in redis.zrange(mc_keys.inbox_unread(user_id, category), 0, -1, withscores=True)}
        assert have == want, category
        assert counters.get(category, 0) == len(want), category
        want_all.update(want)
    have_all = {m.decode(): s for m, s in redis.zrange(mc_keys.inbox_unread(user_id), 0, -1, withscores=True)}
    assert have_all == want_all


# --- unread pages in O(page) ---------------------------------------------------------


def test_an_unread_page_ranges_over_the_unread_zset(redis: Any) -> None:
    """1,000 read and 10 unread items: the unread page is the 10, read from the
    unread zset alone (a member planted only there shows; batch-skipping the
    whole list would never see it), and the zsets hold exactly the unread set."""
    user = UserFactory()
    for i in range(1010):
        if i % 101 != 0:  # 10 unread: offsets 0, 101, ..., 909
            redis.setbit(mc_keys.read_bitmap(user.pk, MONTH), i, 1)
    for i in range(1010):
        _deliver(_entry(i, category=CATEGORY_ORDER[i % 4]), user.pk)
    unread = [f"m{100_000 + i}" for i in range(1010) if i % 101 == 0][::-1]
    page = _page(user.pk, T0 + 5000, unread_only=True)
    assert [row.ref for row in page.rows] == unread
    assert not any(row.read for row in page.rows)
    assert page.counts.unread == 10
    assert_unread_index(redis, user.pk)
    # Per category too.
    for category in CATEGORY_ORDER:
        rows = _page(user.pk, T0 + 5000, unread_only=True, category=category).rows
        assert [r.ref for r in rows] == [r for r in unread if CATEGORY_ORDER[(int(r[1:]) - 100_000) % 4] == category]
    # Planted only in the unread zset (and given a detail): the page reads that zset.
    planted = _entry(5000)
    redis.zadd(mc_keys.inbox_unread(user.pk), {planted.member: T0 + 4000})
    redis.hset(mc_keys.item_detail(), planted.ref, json.dumps({"member": planted.member}))
    rows = _page(user.pk, T0 + 5000, unread_only=True, limit=2).rows
    assert rows[0].ref == planted.ref


def test_unread_pages_walk_by_cursor_over_unread_items_only(redis: Any) -> None:
    user = UserFactory()
    for i in range(30):
        if i % 3:
            redis.setbit(mc_keys.read_bitmap(user.pk, MONTH), i, 1)
        # Pairs of equal times: cursors must split ties right.
        _deliver(_entry(i, score=T0 + i // 2), user.pk)
    seen: list[str] = []
    position: tuple[int, int] | None = None
    while True:
        max_score, skip = position or (None, 0)
        page = _page(user.pk, T0 + 100, unread_only=True, max_score=max_score, skip=skip, limit=3)
        seen += [row.ref for row in page.rows]
        if page.next_position is None:
            break
        position = page.next_position
    everything = [row.ref for row in _page(user.pk, T0 + 100, limit=100).rows]
    assert seen == [ref for ref in everything if (int(ref[1:]) - 100_000) % 3 == 0]


def test_every_read_bit_change_keeps_the_unread_zsets_exact(redis: Any, clock: Any) -> None:
    user = UserFactory()
    uid = user.pk
    now = to_ms(clock.now)
    entries = [_entry(i, category=CATEGORY_ORDER[i % 4], score=now - 1000 + i) for i in range(12)]
    for entry in entries:
        _deliver(entry, uid, now_ms=now)
    assert_unread_index(redis, uid)
    inbox.inbox_set_read(user_id=uid, ref=entries[0].ref, read=True, now_ms=now)
    inbox.inbox_set_read(user_id=uid, ref=entries[1].ref, read=True, now_ms=now)
    inbox.inbox_set_read(user_id=uid, ref=entries[1].ref, read=False, now_ms=now)
    assert_unread_index(redis, uid)
    inbox.inbox_mark_many(user_id=uid, members=[e.member for e in entries[2:5]], read=True, now_ms=now)
    inbox.inbox_mark_many(user_id=uid, members=[entries[3].member], read=False, now_ms=now)
    assert_unread_index(redis, uid)
    inbox.inbox_items_place(
        user_id=uid,
        places=[(entries[5], inbox.ARCHIVED, entries[5].score), (entries[6], inbox.SNOOZED, now + 60_000)],
        now_ms=now,
    )
    assert_unread_index(redis, uid)
    inbox.inbox_hide(user_id=uid, ref=entries[7].ref, now_ms=now)
    assert_unread_index(redis, uid)
    inbox.inbox_read_all(user_id=uid, category="promotion", now_ms=now)
    assert_unread_index(redis, uid)
    # The snoozed item wakes, unread; the archived one comes back with its flag.
    inbox.inbox_counts(user_id=uid, now_ms=now + 61_000)
    assert_unread_index(redis, uid)
    inbox.inbox_items_place(user_id=uid, places=[(entries[5], inbox.LIVE, entries[5].score)], now_ms=now + 61_000)
    assert_unread_index(redis, uid)
    unread = _page(uid, now + 61_000, unread_only=True, limit=50).rows
    assert {row.ref for row in unread} == {entries[i].ref for i in (3, 5, 6, 8, 10, 11)}
    inbox.inbox_read_all(user_id=uid, category=None, now_ms=now + 61_000)
    assert_unread_index(redis, uid)
    assert redis.exists(mc_keys.inbox_unread(uid)) == 0
    assert _page(uid, now + 61_000, unread_only=True).rows == []


def test_an_inbox_without_unread_zsets_gets_them_built_in_bounded_calls(redis: Any, settings: Any) -> None:
    """An inbox written before the unread zsets (or one the drift check resets)."""
    settings.MESSAGECENTER_INBOX_SETTLE_STEP = 4
    user = UserFactory()
    for i in range(25):
        if i % 2:
            redis.setbit(mc_keys.read_bitmap(user.pk, MONTH), i, 1)
        _deliver(_entry(i, category=CATEGORY_ORDER[i % 4], score=T0 + i // 3), user.pk)
    assert inbox.inbox_counts(user_id=user.pk, now_ms=T0).unread == 13  # read once: every item placed
    redis.delete(*scripts.unread_keys(user.pk))
    redis.hset(mc_keys.inbox_counters(user.pk), "system", 99)  # whatever it was: built anew
    redis.hdel(mc_keys.inbox_state(user.pk), "uz")
    months = [str(MONTH)]
    op = scripts.CountsOp()
    mode = scripts.Settle(max_items=10_000, step=4)
    replies = []
    while (reply := scripts.inbox_call(op, user_id=user.pk, now_ms=T0 + 99, months=months, mode=mode)()) == AGAIN:
        replies.append(reply)
        assert len(replies) < 20
    assert len(replies) >= 3  # 25 members, at most 4 (and the ties of the last) a call
    assert_unread_index(redis, user.pk)
    page = _page(user.pk, T0 + 99, unread_only=True, limit=50)
    assert len(page.rows) == 13
    assert page.counts.unread == 13


# --- caps on write --------------------------------------------------------------------


def test_a_delivery_to_an_inbox_at_the_cap_keeps_it_there(redis: Any, settings: Any) -> None:
    settings.MESSAGECENTER_INBOX_MAX_ITEMS = 20
    users = [UserFactory() for _ in range(3)]
    ids_ = [u.pk for u in users]
    for i in range(60):
        if i % 5 == 0:
            redis.setbit(mc_keys.read_bitmap(ids_[0], MONTH), i, 1)
        assert _deliver(_entry(i, category=CATEGORY_ORDER[i % 4]), *ids_) == 3
        for user_id in ids_:
            assert redis.zcard(mc_keys.inbox(user_id)) == min(i + 1, 20)
    for user_id in ids_:
        page = _page(user_id, T0 + 100, limit=50)
        assert [row.ref for row in page.rows] == [f"m{100_000 + i}" for i in range(59, 39, -1)]
        unread = [row.ref for row in page.rows if not row.read]
        assert page.counts.unread == len(unread)
        assert [r.ref for r in _page(user_id, T0 + 100, unread_only=True, limit=50).rows] == unread
        assert_unread_index(redis, user_id)
        # Every evicted member is gone from every structure once settled.
        assert redis.scard(mc_keys.inbox_evicted(user_id)) == 0
        pushed = sum(redis.getbit(mc_keys.push_bitmap(user_id, MONTH), i) for i in range(60))
        assert pushed == 20
    assert len(_page(ids_[0], T0 + 100, unread_only=True, limit=50).rows) == 16


def test_an_inbox_far_over_the_cap_is_trimmed_over_bounded_calls(redis: Any, settings: Any) -> None:
    """Written before caps on write: 3x the cap. Each call removes at most a
    step; the answers (which come once the inbox is settled) are exact."""
    user = UserFactory()
    uid = user.pk
    for i in range(30):
        _deliver(_entry(i, category=CATEGORY_ORDER[i % 2]), uid)
    assert inbox.inbox_counts(user_id=uid, now_ms=T0).unread == 30  # read once: every item placed
    assert redis.zcard(mc_keys.inbox(uid)) == 30
    settings.MESSAGECENTER_INBOX_MAX_ITEMS = 10
    settings.MESSAGECENTER_INBOX_SETTLE_STEP = 4
    mode = scripts.Settle(max_items=10, step=4)
    call = scripts.inbox_call(scripts.CountsOp(), user_id=uid, now_ms=T0 + 99, months=[str(MONTH)], mode=mode)
    # A first bounded call: everything about to be trimmed aside, 4 leave.
    assert call() == AGAIN
    assert redis.zcard(mc_keys.inbox(uid)) == 26
    # A delivery meanwhile trims too (at most 2 per arrival): the 2 placed members
    # leave all, and the rest of their removal waits in the evicted set.
    _deliver(_entry(30), uid)
    assert redis.zcard(mc_keys.inbox(uid)) == 25
    assert redis.scard(mc_keys.inbox_evicted(uid)) == 2
    assert redis.zcard(mc_keys.inbox_arrivals(uid)) == 1
    # The call's step is shared: the 2 evictions are settled first, 2 more
    # leave, and the arrival (placed after the trim: what the trim takes is
    # never placed) waits for the next call.
    assert call() == AGAIN
    assert redis.zcard(mc_keys.inbox(uid)) == 23
    assert redis.scard(mc_keys.inbox_evicted(uid)) == 0
    assert redis.zcard(mc_keys.inbox_arrivals(uid)) == 1
    # A read settles the rest in further bounded calls before it answers.
    page = _page(uid, T0 + 99, limit=50)
    assert [row.ref for row in page.rows] == [f"m{100_000 + i}" for i in range(30, 20, -1)]
    assert page.counts.unread == 10
    assert redis.zcard(mc_keys.inbox(uid)) == 10
    assert_unread_index(redis, uid)


def test_expiry_settles_in_bounded_steps_and_counts_stay_exact(redis: Any, settings: Any) -> None:
    settings.MESSAGECENTER_INBOX_SETTLE_STEP = 3
    user = UserFactory()
    uid = user.pk
    for i in range(10):
        _deliver(_entry(i, category=CATEGORY_ORDER[i % 4], expire_ms=T0 + 1000), uid)
    for i in range(10, 15):
        _deliver(_entry(i, category=CATEGORY_ORDER[i % 4]), uid)
    assert _page(uid, T0 + 10).counts.unread == 15
    mode = scripts.Settle(max_items=10_000, step=3)
    call = scripts.inbox_call(scripts.CountsOp(), user_id=uid, now_ms=T0 + 1000, months=[str(MONTH)], mode=mode)
    assert call() == AGAIN  # 3 of the 10 expired ones: the answer waits
    assert redis.zcard(mc_keys.inbox(uid)) == 12
    page = _page(uid, T0 + 1000, limit=50)
    assert [row.ref for row in page.rows] == [f"m{100_000 + i}" for i in range(14, 9, -1)]
    assert page.counts.unread == 5
    assert page.counts.unread_by_category == {
        c: sum(1 for i in range(10, 15) if i % 4 == k) for k, c in enumerate(CATEGORY_ORDER)
    }
    assert [r.ref for r in _page(uid, T0 + 1000, unread_only=True, category="system").rows] == ["m100012"]
    assert_unread_index(redis, uid)


def test_a_full_inbox_loses_expired_items_before_live_ones(redis: Any, settings: Any) -> None:
    settings.MESSAGECENTER_INBOX_MAX_ITEMS = 5
    user = UserFactory()
    uid = user.pk
    _deliver(_entry(0), uid)
    _deliver(_entry(1, expire_ms=T0 + 100), uid)
    for i in range(2, 5):
        _deliver(_entry(i), uid)
    # Full; item 1 expired: the next delivery drops it, not the oldest live item 0.
    _deliver(_entry(5), uid, now_ms=T0 + 200)
    assert {m.decode() for m in redis.zrange(mc_keys.inbox(uid), 0, -1)} == {_entry(i).member for i in (0, 2, 3, 4, 5)}
    assert [r.ref for r in _page(uid, T0 + 200).rows] == [f"m{100_000 + i}" for i in (5, 4, 3, 2, 0)]
    assert_unread_index(redis, uid)


def test_an_evicted_item_delivered_again_is_counted_once(redis: Any, settings: Any) -> None:
    settings.MESSAGECENTER_INBOX_MAX_ITEMS = 3
    user = UserFactory()
    uid = user.pk
    _deliver(_entry(0, category="promotion"), uid)
    assert inbox.inbox_counts(user_id=uid, now_ms=T0).unread == 1  # read once: placed
    for i in range(1, 4):
        _deliver(_entry(i), uid)
    assert redis.sismember(mc_keys.inbox_evicted(uid), _entry(0, category="promotion").member)
    settings.MESSAGECENTER_INBOX_MAX_ITEMS = 10
    # A rerun of the fan-out (it is idempotent) brings it back before any read settled it.
    _deliver(_entry(0, category="promotion"), uid)
    counts = _page(uid, T0 + 10).counts
    assert counts.unread_by_category["promotion"] == 1
    assert counts.unread == 4
    assert_unread_index(redis, uid)


# --- both paths agree on unread pages, over a cap and with expiry ---------------------


def test_fallback_and_redis_agree_on_unread_pages_over_the_cap(
    redis: Any, operator: Any, recipient: Any, clock: Any, settings: Any
) -> None:
    settings.MESSAGECENTER_INBOX_MAX_ITEMS = 6
    settings.MESSAGECENTER_INBOX_SETTLE_STEP = 1
    sent = []
    for i in range(10):
        clock.advance(seconds=1)
        # Only items past the cap expire: once the cap dropped an item, PostgreSQL
        # alone would show it again when a newer one expired (it keeps the newest
        # live ones), which a trimmed Redis inbox cannot (nor could it before).
        expire = clock.now + timedelta(minutes=5) if i in (0, 2, 3) else None
        sent.append(
            send(operator, to={"users": [recipient]}, category=CATEGORY_ORDER[i % 4], title=f"i{i}", expire_at=expire)
        )
    services.inbox_mark_read(user=recipient, item_id=sent[8].ref)
    services.inbox_mark_read(user=recipient, item_id=sent[5].ref)
    for minutes in (0, 6):
        clock.advance(minutes=minutes)
        now = clock.now
        for category in (None, *CATEGORY_ORDER):
            for unread_only in (False, True):
                query = {"category": category, "unread_only": unread_only, "since_ms": None, "limit": 2}

                def redis_path(**q: Any) -> Page:
                    page = inbox.inbox_page(user_id=recipient.pk, now_ms=to_ms(now), **q)  # noqa: B023
                    assert isinstance(page, Page)
                    return page

                def postgres_path(**q: Any) -> Page:
                    return fallback.inbox_page(user_id=recipient.pk, now=now, **q)  # noqa: B023

                assert walk(postgres_path, **query) == walk(redis_path, **query), (minutes, category, unread_only)
        assert fallback.inbox_counts(user_id=recipient.pk, now=now) == inbox.inbox_counts(
            user_id=recipient.pk, now_ms=to_ms(now)
        )
        assert_unread_index(redis, recipient.pk)


# --- bounded steps: every call settles at most a step, and the steps converge ----------


def _settle_calls(redis: Any, user_id: int, *, max_items: int, step: int, now_ms: int) -> list[dict[str, Any]]:
    """Settle-only calls until one answers: the sizes each call left behind
    (the first entry: before any call) and how far the unread walk got, to
    check what each call did."""

    def sizes() -> dict[str, Any]:
        return {
            "uz": (redis.hget(mc_keys.inbox_state(user_id), "uz") or b"").decode(),
            "all": redis.zcard(mc_keys.inbox(user_id)),
            "categories": sum(redis.zcard(mc_keys.inbox_category(user_id, c)) for c in CATEGORY_ORDER),
            "unread": redis.zcard(mc_keys.inbox_unread(user_id)),
            "evicted": redis.scard(mc_keys.inbox_evicted(user_id)),
            "arrivals": redis.zcard(mc_keys.inbox_arrivals(user_id)),
            "expiry": redis.zcard(mc_keys.inbox_expiry(user_id)),
        }

    mode = scripts.Settle(max_items=max_items, step=step)
    call = scripts.inbox_call(scripts.CountsOp(), user_id=user_id, now_ms=now_ms, months=[str(MONTH)], mode=mode)
    seen = [sizes()]
    while True:
        reply = call()
        seen.append(sizes())
        assert len(seen) < 1000
        if reply != AGAIN:
            return seen


def test_many_deliveries_past_the_cap_settle_in_steps_to_the_newest_items(redis: Any, settings: Any) -> None:
    """Three times the cap delivered with no read between: each delivery keeps
    all and the arrivals at the cap (an arrival evicted before any read took
    it in leaves everything at once); the first read places the rest at most
    a step a call, and then holds exactly the newest items, counted."""
    settings.MESSAGECENTER_INBOX_MAX_ITEMS = 25
    step = 7
    placed_per_call = step // ARRIVAL_COST  # an arrival counts as that many members of a call's step
    users = [UserFactory().pk for _ in range(2)]
    for i in range(75):
        if i % 3 == 0:
            redis.setbit(mc_keys.read_bitmap(users[0], MONTH), i, 1)
        _deliver(_entry(i, category=CATEGORY_ORDER[i % 4]), *users)
    for user_id in users:
        assert redis.zcard(mc_keys.inbox(user_id)) == 25
        assert redis.zcard(mc_keys.inbox_arrivals(user_id)) == 25
        assert redis.exists(mc_keys.inbox_evicted(user_id)) == 0
        seen = _settle_calls(redis, user_id, max_items=25, step=step, now_ms=T0 + 100)
        for before, after in pairwise(seen):
            placed = before["arrivals"] - after["arrivals"]
            assert 0 <= placed <= placed_per_call
            assert after["categories"] - before["categories"] == placed
            assert after["all"] == 25
            # The unread zsets grow with what is placed: nothing is walked (the
            # walk's check waits for the last arrival, then finds them in step).
            assert after["unread"] - before["unread"] <= placed
            assert after["uz"] == ("done" if after["arrivals"] == 0 else "")
        # 25 arrivals, a step a call: no call placed less than it could.
        assert len(seen) - 1 == -(-25 // placed_per_call)
        newest = [f"m{100_000 + i}" for i in range(74, 49, -1)]
        page = _page(user_id, T0 + 100, limit=50)
        assert [row.ref for row in page.rows] == newest
        unread = [row.ref for row in page.rows if not row.read]
        assert page.counts.unread == len(unread)
        assert [r.ref for r in _page(user_id, T0 + 100, unread_only=True, limit=50).rows] == unread
        assert_unread_index(redis, user_id)
        pushed = [i for i in range(75) if redis.getbit(mc_keys.push_bitmap(user_id, MONTH), i)]
        assert pushed == list(range(50, 75))
    assert len(_page(users[0], T0 + 100, unread_only=True, limit=50).rows) == 17  # 8 of the 25 were read


def test_an_inbox_over_the_cap_is_trimmed_oldest_first_and_walked_newest_first(redis: Any) -> None:
    """Written before caps on write and before the unread zsets: the trim and
    the walk that builds the unread zsets share each call's step, and the
    walk starts from the newest end, so it never visits a trimmed member."""
    user_id = UserFactory().pk
    for i in range(30):
        if i % 2:
            redis.setbit(mc_keys.read_bitmap(user_id, MONTH), i, 1)
        _deliver(_entry(i, category=CATEGORY_ORDER[i % 4]), user_id)
    assert inbox.inbox_counts(user_id=user_id, now_ms=T0).unread == 15  # read once: every item placed
    redis.delete(*scripts.unread_keys(user_id))
    redis.hdel(mc_keys.inbox_state(user_id), "uz")
    seen = _settle_calls(redis, user_id, max_items=10, step=4, now_ms=T0 + 100)
    for before, after in pairwise(seen):
        trimmed, walked = before["all"] - after["all"], after["unread"] - before["unread"]
        assert trimmed >= 0
        assert walked >= 0
        assert trimmed + walked <= 4
    # 20 trimmed, then the 10 left walked (5 of them unread): 30 members, 4 a call.
    assert len(seen) - 1 == 8
    assert [s["all"] for s in seen] == [30, 26, 22, 18, 14, 10, 10, 10, 10]
    # The walk waits for the trim (started, nothing walked), then goes down from the newest.
    assert [s["uz"] for s in seen[1:6]] == ["top"] * 5
    assert [s["uz"] for s in seen[6:]] == [str(T0 + 26), str(T0 + 22), "done"]
    page = _page(user_id, T0 + 100, limit=50)
    assert [row.ref for row in page.rows] == [f"m{100_000 + i}" for i in range(29, 19, -1)]
    assert page.counts.unread == 5
    assert_unread_index(redis, user_id)


def test_expired_members_go_before_the_cap_counts_an_inbox_over_it(redis: Any, settings: Any) -> None:
    """15 items, the 5 newest expired, cap 10: the 10 live ones all stay. A
    trim counting the expired ones still there would drop the oldest live
    ones while the expiry took its steps."""
    settings.MESSAGECENTER_INBOX_MAX_ITEMS = 10**6  # written before caps on write
    user_id = UserFactory().pk
    for i in range(15):
        _deliver(_entry(i, expire_ms=T0 + 50 if i >= 10 else 0), user_id)
    assert inbox.inbox_counts(user_id=user_id, now_ms=T0).unread == 15  # read once: every item placed
    seen = _settle_calls(redis, user_id, max_items=10, step=3, now_ms=T0 + 100)
    # 3 expired, then 2 (the step's last member walks into the unread zsets), and never below 10.
    assert [s["all"] for s in seen[:3]] == [15, 12, 10]
    assert min(s["all"] for s in seen) == 10
    settings.MESSAGECENTER_INBOX_MAX_ITEMS = 10
    page = _page(user_id, T0 + 100, limit=50)
    assert [row.ref for row in page.rows] == [f"m{100_000 + i}" for i in range(9, -1, -1)]
    assert page.counts.unread == 10
    assert_unread_index(redis, user_id)


def test_a_delivery_to_a_full_inbox_of_expired_items_takes_out_a_few_each(redis: Any, settings: Any) -> None:
    """Each delivery looks at no more than two expired members per recipient
    (a call carries many recipients) and evicts no live one while more expired
    ones may be due; reads then settle the rest, and the newest live stay."""
    settings.MESSAGECENTER_INBOX_MAX_ITEMS = 10
    user_id = UserFactory().pk
    for i in range(10):
        _deliver(_entry(i, expire_ms=T0 + 50 if i < 8 else 0), user_id)
    sizes = []
    for i in range(10, 13):
        _deliver(_entry(i), user_id, now_ms=T0 + 100)
        sizes.append(redis.zcard(mc_keys.inbox(user_id)))
    # Over the cap by one: two expired out (not all eight), no live one; then at the cap.
    assert sizes == [9, 10, 9]
    assert redis.zcard(mc_keys.inbox_expiry(user_id)) == 4
    # Arrivals nobody read: removed whole, nothing waits.
    assert redis.exists(mc_keys.inbox_evicted(user_id)) == 0
    assert redis.zcard(mc_keys.inbox_arrivals(user_id)) == 9
    page = _page(user_id, T0 + 100, limit=50)
    assert [row.ref for row in page.rows] == [f"m{100_000 + i}" for i in (12, 11, 10, 9, 8)]
    assert page.counts.unread == 5
    assert redis.zcard(mc_keys.inbox_expiry(user_id)) == 0
    assert_unread_index(redis, user_id)


def test_an_inbox_whose_user_never_reads_stays_at_the_cap_in_every_structure(redis: Any, settings: Any) -> None:
    """Deliveries to a user who does not read write all, the arrivals and the
    expiry entries only, each kept at the cap as items arrive; once a read
    placed some, evicting those leaves the rest of their removal in the
    evicted set, no bigger than what that read placed. Every structure stays
    bounded by the cap however long the user does not read."""
    settings.MESSAGECENTER_INBOX_MAX_ITEMS = 10
    user_id = UserFactory().pk

    def entry(i: int) -> InboxEntry:
        return _entry(i, category=CATEGORY_ORDER[i % 4], expire_ms=T0 + 10**6 if i % 2 else 0)

    for i in range(40):
        if i % 4 == 0:
            redis.setbit(mc_keys.read_bitmap(user_id, MONTH), i, 1)
        _deliver(entry(i), user_id)
        assert redis.zcard(mc_keys.inbox(user_id)) == min(i + 1, 10)
        assert redis.zcard(mc_keys.inbox_arrivals(user_id)) == min(i + 1, 10)
    assert redis.exists(mc_keys.inbox_evicted(user_id), mc_keys.push_bitmap(user_id, MONTH)) == 0
    assert redis.exists(*(mc_keys.inbox_category(user_id, c) for c in CATEGORY_ORDER)) == 0
    assert redis.zcard(mc_keys.inbox_expiry(user_id)) == 5
    unread = [i for i in range(30, 40) if i % 4]
    page = _page(user_id, T0 + 100, limit=50)
    assert [row.ref for row in page.rows] == [f"m{100_000 + i}" for i in range(39, 29, -1)]
    assert page.counts.unread == len(unread)
    assert_unread_index(redis, user_id)
    assert [i for i in range(40) if redis.getbit(mc_keys.push_bitmap(user_id, MONTH), i)] == list(range(30, 40))
    # Placed now: 30 more deliveries, no read between.
    for i in range(40, 70):
        if i % 4 == 0:
            redis.setbit(mc_keys.read_bitmap(user_id, MONTH), i, 1)
        _deliver(entry(i), user_id)
        assert redis.zcard(mc_keys.inbox(user_id)) == 10
        assert redis.zcard(mc_keys.inbox_arrivals(user_id)) == min(i - 39, 10)
        assert redis.scard(mc_keys.inbox_evicted(user_id)) == min(i - 39, 10)
        assert sum(redis.zcard(mc_keys.inbox_category(user_id, c)) for c in CATEGORY_ORDER) == 10
    unread = [i for i in range(60, 70) if i % 4]
    page = _page(user_id, T0 + 100, limit=50)
    assert [row.ref for row in page.rows] == [f"m{100_000 + i}" for i in range(69, 59, -1)]
    assert page.counts.unread == len(unread)
    assert redis.exists(mc_keys.inbox_evicted(user_id), mc_keys.inbox_arrivals(user_id)) == 0
    assert_unread_index(redis, user_id)
    assert [i for i in range(70) if redis.getbit(mc_keys.push_bitmap(user_id, MONTH), i)] == list(range(60, 70))


# --- arrivals: what a fan-out leaves to the next read ---------------------------------


def test_a_batch_places_the_arrivals_its_later_ops_act_on(redis: Any, settings: Any) -> None:
    """A batch's first call settles a step (here 1) and answers AGAIN; the
    ops after it run without settling, and each places the arrival it acts
    on first: the hides are exact and the counts stay in step."""
    settings.MESSAGECENTER_INBOX_SETTLE_STEP = 1
    uid = UserFactory().pk
    entries = [_entry(i, category=CATEGORY_ORDER[i % 4]) for i in range(6)]
    for entry in entries:
        _deliver(entry, uid)
    assert redis.zcard(mc_keys.inbox_arrivals(uid)) == 6
    hidden = [entries[0].member, entries[3].member, entries[5].member]
    assert inbox.inbox_hide_many(user_id=uid, members=hidden, now_ms=T0 + 10) == 3
    page = _page(uid, T0 + 10)
    assert [row.ref for row in page.rows] == [entries[i].ref for i in (4, 2, 1)]
    assert page.counts.unread == 3
    assert redis.exists(mc_keys.inbox_arrivals(uid)) == 0
    assert_unread_index(redis, uid)


def test_an_arrival_of_a_month_the_call_does_not_pass_waits_for_one_that_does(redis: Any) -> None:
    """A call planned on months read before the fan-out added a new one has no
    bitmaps of that month: the arrival stays an arrival (not dropped, not
    counted half), and the next call that passes the month places it."""
    uid = UserFactory().pk
    old, new = _entry(1), InboxEntry(ref="m200001", category="system", month=202612, offset=1, score=T0 + 5)
    _deliver(old, uid)
    _deliver(new, uid)
    mode = scripts.Settle(max_items=100, step=100)
    counts = scripts.inbox_call(scripts.CountsOp(), user_id=uid, now_ms=T0 + 10, months=[str(MONTH)], mode=mode)
    flat, _unseen = counts()
    assert dict(zip(flat[::2], flat[1::2], strict=True)) == {b"system": b"1"}  # the old one only
    assert redis.zrange(mc_keys.inbox_arrivals(uid), 0, -1) == [new.member.encode()]
    assert inbox.inbox_counts(user_id=uid, now_ms=T0 + 10).unread == 2  # planned: both months
    assert redis.exists(mc_keys.inbox_arrivals(uid)) == 0
    assert_unread_index(redis, uid)


def test_an_arrival_removed_before_any_read_leaves_nothing_behind(redis: Any) -> None:
    """Retracted, or expired, before its user read: it leaves all and the
    arrivals, and no counter, zset or bit ever held it."""
    uid = UserFactory().pk
    kept, retracted, expiring = _entry(1), _entry(2), _entry(3, expire_ms=T0 + 50)
    for entry in (kept, retracted, expiring):
        _deliver(entry, uid)
    publish.item_remove(entry=retracted)
    page = _page(uid, T0 + 100)
    assert [row.ref for row in page.rows] == [kept.ref]
    assert page.counts.unread == 1
    assert redis.exists(mc_keys.inbox_arrivals(uid)) == 0
    assert redis.zrange(mc_keys.inbox_category(uid, "system"), 0, -1) == [kept.member.encode()]
    assert [i for i in range(5) if redis.getbit(mc_keys.push_bitmap(uid, MONTH), i)] == [1]
    assert_unread_index(redis, uid)


def test_arrivals_over_the_cap_are_trimmed_before_any_is_placed(redis: Any, settings: Any) -> None:
    """Three times the cap arrived while the cap was higher: the settling calls
    trim the oldest arrivals first and place only the newest, so no call
    places a member a later call takes out again."""
    uid = UserFactory().pk
    for i in range(30):
        _deliver(_entry(i, category=CATEGORY_ORDER[i % 4]), uid)
    settings.MESSAGECENTER_INBOX_MAX_ITEMS = 10
    seen = _settle_calls(redis, uid, max_items=10, step=6, now_ms=T0 + 100)
    # 6 trimmed a call down to the cap, then 6 placed a call (an arrival counts
    # as ARRIVAL_COST members of the step; the call that ends the trim places
    # four with what is left).
    assert [s["all"] for s in seen] == [30, 24, 18, 12, 10, 10]
    assert [s["categories"] for s in seen] == [0, 0, 0, 0, 4, 10]
    assert [s["arrivals"] for s in seen] == [30, 24, 18, 12, 6, 0]
    page = _page(uid, T0 + 100, limit=50)
    assert [row.ref for row in page.rows] == [f"m{100_000 + i}" for i in range(29, 19, -1)]
    assert page.counts.unread == 10
    assert_unread_index(redis, uid)


def test_many_arrivals_of_a_month_the_calls_do_not_pass_never_keep_them_calling(redis: Any) -> None:
    """More arrivals of an unknown month than a call places, with placeable
    ones behind them: the calls place the known ones and then answer (the
    others wait behind, not popped again and again), and a planned read
    places the rest."""
    uid = UserFactory().pk
    later = [InboxEntry(ref=f"m2{i:05d}", category="system", month=202612, offset=i, score=T0 + i) for i in range(20)]
    known = [_entry(100 + i, score=T0 + 1000 + i) for i in range(5)]
    for entry in (*later, *known):
        _deliver(entry, uid)
    seen = _settle_calls(redis, uid, max_items=100, step=12, now_ms=T0 + 2000)  # 4 arrivals a call
    assert len(seen) - 1 <= 10
    assert seen[-1]["categories"] == 5  # the known ones, placed
    assert seen[-1]["arrivals"] == 20  # the others wait
    assert {s for _m, s in redis.zrange(mc_keys.inbox_arrivals(uid), 0, -1, withscores=True)} == {float("inf")}
    assert inbox.inbox_counts(user_id=uid, now_ms=T0 + 2000).unread == 25  # planned: both months
    assert redis.exists(mc_keys.inbox_arrivals(uid)) == 0
    assert_unread_index(redis, uid)


# --- a fill keeps the cap too ----------------------------------------------------------------


@pytest.mark.parametrize("batch", [1000, 3], ids=["one call", "calls of three"])
def test_a_fill_keeps_the_newest_items_up_to_the_cap(
    operator: Any, recipient: Any, redis: Any, settings: Any, monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    """A user filled from PostgreSQL with more live items than an inbox keeps
    gets the newest of them, without the hidden and the expired ones, as
    PostgreSQL computes it, each placed by the fill (counted, in the unread
    index); the notifications among them are in the expiry sweep's index."""
    from django.utils import timezone

    from messagecenter.fill import inbox_fill
    from messagecenter.items import notification_entry
    from messagecenter.readmodel.user_part import user_part_drop

    monkeypatch.setattr(publish, "FILL_BATCH", batch)
    settings.MESSAGECENTER_PUSH_THRESHOLD = 10
    settings.MESSAGECENTER_INBOX_MAX_ITEMS = 5
    services.message_type_create(code="stock", name="Stock", default_ttl_seconds=3600)
    services.subscription_create(message_type="stock", scope="WH1", user_id=recipient.pk)
    sent = [send(operator, to={"users": [recipient]}, title=f"t{i}").ref for i in range(6)]
    notified = services.notification_send(message_type="stock", scope="WH1", title="Low", body_html="")
    sent.append(notified.ref)
    services.inbox_hide(user=recipient, item_id=sent[5])
    gone = send(operator, to={"users": [recipient]}, expire_at=timezone.now() + timedelta(seconds=1))
    services.message_cleanup_expired(now=timezone.now() + timedelta(seconds=2))  # expired since
    now = to_ms(timezone.now() + timedelta(seconds=2))
    assert gone.ref not in [row.ref for row in _page(recipient.pk, now).rows]

    user_part_drop(user_id=recipient.pk, group_keys=())
    assert inbox_fill(user_id=recipient.pk)
    # Placed by the fill itself: nothing waits for the first read to place it.
    assert redis.exists(mc_keys.inbox_arrivals(recipient.pk)) == 0
    assert_unread_index(redis, recipient.pk)
    after = [row.ref for row in _page(recipient.pk, now).rows]
    truth = fallback.inbox_page(user_id=recipient.pk, now=timezone.now() + timedelta(seconds=2), **whole_inbox(20))
    assert after == [row.ref for row in truth.rows] == [notified.ref, sent[4], sent[3], sent[2], sent[1]]
    assert redis.zscore(mc_keys.user_notifications(recipient.pk), notification_entry(notified).member) is not None


def test_a_group_names_its_newest_actors_by_time_whatever_order_items_join(redis: Any) -> None:
    """Items of one key delivered out of time order (a merge on read brings an
    older item after newer ones): the row's actors are the three newest
    distinct ones by the items' times, as PostgreSQL computes them."""
    uid = UserFactory().pk
    # (offset, time, actor), in the order they are delivered.
    arrivals = [(1, 50, "Dan"), (2, 40, "Cat"), (3, 30, "Ann"), (4, 45, "Ben"), (5, 10, "Eve"), (6, 35, "Dan")]
    for i, at, actor in arrivals:
        entry = InboxEntry(f"m{100_000 + i}", "system", MONTH, i, T0 + at, 0, "k", actor)
        _deliver(entry, uid)
    page = _page(uid, T0 + 100)
    assert [row.ref for row in page.rows] == ["m100001"]
    groups = readmodel_grouping.groups_of(user_id=uid, refs=["m100001"])
    # By time: Dan 50, Ben 45, Cat 40, Dan 35, Ann 30, Eve 10.
    assert groups["m100001"] == {"key": "k", "count": 6, "actors": ["Dan", "Ben", "Cat"]}
