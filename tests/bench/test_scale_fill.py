"""The scale run's fill (bench/scale.py): its plan, and a small fill through
the read model's write path giving every user what the plan says."""

import random
from collections import Counter

import pytest

from bench import scale
from core.redis import get_redis
from messagecenter import keys as mc_keys
from messagecenter.readmodel import InboxEntry, inbox

NOW_MS = 1_790_000_000_000  # 2026-09-21


def test_plan_entries_tiers_and_dense_offsets() -> None:
    plan = scale.plan_fill(users=10_000, entries=100_000, batch=500, now_ms=NOW_MS)
    assert sum(item.recipients for item in plan.items) == 100_000
    tiers = {t.name: t for t in plan.tiers}
    assert [t.name for t in plan.tiers] == ["light", "medium", "heavy"]
    # The tiers cover every user once, in order.
    assert plan.tiers[0].low == 1
    assert plan.tiers[-1].high == 10_000
    assert all(a.high + 1 == b.low for a, b in zip(plan.tiers, plan.tiers[1:], strict=False))
    # Most users hold few items, a few hold many.
    per_user = {t.name: t.entries / (t.high - t.low + 1) for t in plan.tiers}
    assert per_user["light"] < per_user["medium"] < per_user["heavy"]
    assert tiers["light"].high - tiers["light"].low + 1 == 9_000
    singles = [i for i in plan.items if i.tier == "single"]
    assert len(singles) == 100
    assert all(i.recipients == 1 for i in singles)
    assert all(i.recipients <= 500 for i in plan.items)
    # Offsets are dense per month, in time order, as slot_allocate hands them out.
    scores = [i.score for i in plan.items]
    assert scores == sorted(scores)
    for month, count in plan.months().items():
        assert sorted(i.offset for i in plan.items if i.month == month) == list(range(count))
    assert len({i.ref for i in plan.items}) == len(plan.items)
    # Each member has the read model's layout.
    first = plan.items[0]
    entry = InboxEntry(first.ref, first.category, first.month, first.offset, first.score)
    assert InboxEntry.from_member(entry.member, score=first.score) == entry


def test_plan_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="at least 100 users"):
        scale.plan_fill(users=10, entries=100, batch=10, now_ms=NOW_MS)


def test_recipients_are_distinct_users_of_the_tier() -> None:
    plan = scale.plan_fill(users=1_000, entries=5_000, batch=200, now_ms=NOW_MS)
    rng = random.Random(1)
    for item in plan.items[:50]:
        users = scale.recipients_of(plan, item, rng)
        assert len(users) == len(set(users)) == item.recipients
        if item.tier != "single":
            tier = next(t for t in plan.tiers if t.name == item.tier)
            assert all(tier.low <= u <= tier.high for u in users)


@pytest.mark.not_on_cluster(reason="the fill streams deliver calls as a single Redis takes them, as the scale run does")
def test_fill_gives_every_user_the_planned_entries() -> None:
    plan = scale.plan_fill(users=200, entries=2_000, batch=50, now_ms=NOW_MS, days=10)
    expected: Counter[int] = Counter()
    rng = random.Random(21)  # fill's own seed: the same draws
    for item in plan.items:
        expected.update(scale.recipients_of(plan, item, rng))
    filled = scale.fill(plan, now_ms=NOW_MS)
    assert filled["delivered"] == 2_000
    client = get_redis()
    for user_id in (1, 50, 150, 199, 200):
        assert client.zcard(mc_keys.inbox(user_id)) == expected[user_id]
        counts = inbox.inbox_counts(user_id=user_id, now_ms=NOW_MS)
        assert counts.unread == expected[user_id]
