"""The bulletin merge on read takes in what changed, not every live bulletin.

With 1,000 live bulletins, a read after one publish, edit, delete or display
time looks at one config (``_Plan.bulletins_read``), and the inbox it leaves
is the one PostgreSQL implies. A full merge would look at all of them, so
these tests fail if the read regressed to it.
"""

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from core.redis import get_redis
from messagecenter import fallback, services
from messagecenter import keys as mc_keys
from messagecenter.items import bulletin_entry
from messagecenter.models import Bulletin
from messagecenter.readmodel import inbox, to_ms
from tests.messagecenter.conftest import Clock, make_group, whole_inbox

pytestmark = pytest.mark.django_db(transaction=True)

LIVE = 1000


class PlanSpy:
    """Records every plan the reads make (the planned route's work)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.plans: list[Any] = []
        original = inbox._plan

        def spy(*args: Any, **kwargs: Any) -> Any:
            plan = original(*args, **kwargs)
            self.plans.append(plan)
            return plan

        monkeypatch.setattr(inbox, "_plan", spy)

    def read(self, user: Any) -> Any:
        """One read of the user's counts; the plan it made (None: the one-round-trip path)."""
        before = len(self.plans)
        inbox.inbox_counts(user_id=user.pk, now_ms=to_ms(timezone.now()))
        return self.plans[-1] if len(self.plans) > before else None


def settled(plan: Any) -> bool:
    """A read with nothing to take in: the one-round-trip path (no plan), or on
    a Redis Cluster (which has no such path) a plan that looked at no config."""
    return plan is None or (plan.bulletins_read == 0 and not plan.merge.candidates)


def refs(user: Any) -> list[str]:
    page = inbox.inbox_page(user_id=user.pk, now_ms=to_ms(timezone.now()), **whole_inbox(LIVE + 10))
    assert isinstance(page, inbox.Page)
    return [row.ref for row in page.rows]


def fallback_refs(user: Any) -> list[str]:
    page = fallback.inbox_page(user_id=user.pk, now=timezone.now(), **whole_inbox(LIVE + 10))
    return [row.ref for row in page.rows]


def publish(title: str, **extra: Any) -> Bulletin:
    extra.setdefault("display_time", timezone.now() - timedelta(minutes=1))
    return services.bulletin_create(title=title, body_html="", **extra)


def test_one_change_costs_one_config_at_1000_live(
    clock: Clock, recipient: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = make_group("vip", recipient)
    for i in range(LIVE):
        publish(f"b{i}", group_ids=[group.pk] if i % 2 else [])
    spy = PlanSpy(monkeypatch)
    # The first read merges everything once (nothing merged yet).
    assert spy.read(recipient).bulletins_read == LIVE
    assert settled(spy.read(recipient))

    clock.advance(seconds=1)
    new = publish("new")
    plan = spy.read(recipient)
    assert plan.bulletins_read == 1
    assert [c[0] for c in plan.merge.candidates] == [bulletin_entry(new).member]
    assert settled(spy.read(recipient))

    # An edit: its removal and its one config, merged again at the new time.
    edited = Bulletin.objects.order_by("pk")[3]
    services.bulletin_update(bulletin=edited, data={"display_time": timezone.now()})
    plan = spy.read(recipient)
    assert plan.bulletins_read == 1
    assert list(plan.merge.removals) == [bulletin_entry(edited).member]
    assert [c[0] for c in plan.merge.candidates] == [bulletin_entry(edited).member]

    # A delete: the removal only, no config.
    gone = Bulletin.objects.order_by("pk")[5]
    gone_ref = gone.ref
    services.bulletin_delete(bulletin=gone)
    plan = spy.read(recipient)
    assert (plan.bulletins_read, list(plan.merge.candidates)) == (0, [])
    assert len(plan.merge.removals) == 1

    # A bulletin of another group: one config looked at, nothing merged.
    other = services.bulletin_create(
        title="theirs", body_html="", display_time=timezone.now(), group_ids=[make_group("them").pk]
    )
    plan = spy.read(recipient)
    assert (plan.bulletins_read, list(plan.merge.candidates)) == (1, [])

    # Scheduled: looked at when published (not due), merged when its display
    # time passes, with no change in between: the configs due since the last merge.
    later = publish("later", display_time=timezone.now() + timedelta(minutes=5))
    plan = spy.read(recipient)
    assert (plan.bulletins_read, list(plan.merge.candidates)) == (1, [])
    assert settled(spy.read(recipient))
    clock.advance(minutes=5)
    plan = spy.read(recipient)
    assert plan.bulletins_read == 1
    assert [c[0] for c in plan.merge.candidates] == [bulletin_entry(later).member]

    shown = refs(recipient)
    assert len(shown) == LIVE + 1  # 1,000 + new + later - the deleted one
    assert {new.ref, later.ref, edited.ref} <= set(shown)
    assert not {gone_ref, other.ref} & set(shown)
    assert shown == fallback_refs(recipient)


def test_a_membership_change_merges_that_user_once(
    clock: Clock, recipient: Any, other_recipient: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = make_group("vip", other_recipient)
    mine = [publish(f"b{i}", group_ids=[group.pk]).ref for i in range(20)]
    spy = PlanSpy(monkeypatch)
    assert refs(recipient) == []
    assert refs(other_recipient) != []
    services.user_group_add_members(group=group, user_ids=[recipient.pk])
    # The late joiner takes in every live bulletin once; the others' next
    # read has nothing to take in.
    assert spy.read(recipient).bulletins_read == 20
    assert settled(spy.read(other_recipient))
    assert sorted(refs(recipient)) == sorted(mine)
    services.user_group_remove_members(group=group, user_ids=[recipient.pk])
    assert refs(recipient) == [] == fallback_refs(recipient)


def test_a_log_without_floor_means_a_full_merge(clock: Clock, recipient: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Changes made before the log existed (an upgrade) or a lost floor: the
    log cannot say what a reader missed, so the reader merges everything once."""
    for i in range(5):
        publish(f"b{i}")
    spy = PlanSpy(monkeypatch)
    assert spy.read(recipient).bulletins_read == 5
    get_redis().delete(mc_keys.bulletin_changes_floor())
    clock.advance(seconds=1)
    publish("new")  # the floor is set again to the marker before this change
    assert spy.read(recipient).bulletins_read == 1
    # A reader whose access time is below the floor merges everything once.
    get_redis().set(mc_keys.bulletin_changes_floor(), to_ms(timezone.now()) + 10_000)
    clock.advance(seconds=1)
    publish("newer")
    assert spy.read(recipient).bulletins_read == 7
    assert len(refs(recipient)) == 7 == len(fallback_refs(recipient))
