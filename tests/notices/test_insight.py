"""Operator insight: per-hour first-read counters, the read-rate chart and the
paged list of users who have not read an announcement."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from notices import insight, readmodel
from notices import keys as notice_keys
from notices.services import announcement_mark_read, announcement_mark_unread
from tests.factories import StaffFactory, UserFactory
from tests.notices.conftest import announce, on_platforms

pytestmark = pytest.mark.django_db(transaction=True)

NOW = datetime(2026, 11, 22, 10, 30, tzinfo=UTC)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Any:
    state = {"now": NOW}
    monkeypatch.setattr(timezone, "now", lambda: state["now"])
    return state


def test_first_reads_are_counted_per_hour(clock: Any) -> None:
    a = announce(["user"], publish_at=NOW - timedelta(hours=1))
    users = [UserFactory() for _ in range(4)]
    announcement_mark_read(user=users[0], announcement_id=a.pk)
    announcement_mark_read(user=users[1], announcement_id=a.pk)
    announcement_mark_read(user=users[1], announcement_id=a.pk)  # already read: not counted again
    clock["now"] = NOW + timedelta(hours=2)
    announcement_mark_read(user=users[2], announcement_id=a.pk)
    announcement_mark_unread(user=users[0], announcement_id=a.pk)  # a first read stays a first read

    timeline = insight.announcement_read_timeline(announcement=a)
    assert [(p.hour, p.reads, p.cumulative) for p in timeline] == [
        (datetime(2026, 11, 22, 10, tzinfo=UTC), 2, 2),
        (datetime(2026, 11, 22, 12, tzinfo=UTC), 1, 3),
    ]


def test_counters_share_the_bitmaps_slot() -> None:
    """The mark script touches both: on Redis Cluster they must map to one slot."""
    from redis.cluster import key_slot

    assert key_slot(notice_keys.read_hours("user", 3, 7).encode()) == key_slot(
        notice_keys.bitmap("user", 3, 7).encode()
    )


def test_non_readers_are_paged_in_id_order(clock: Any, settings: Any) -> None:
    a = announce(["user", "customer"], publish_at=NOW - timedelta(hours=1))
    users = [UserFactory(username=f"u{n:02d}") for n in range(7)]
    StaffFactory(username="staff")  # an operator by default: not on "user"
    on_platforms(users[6], "customer")  # moved off "user"
    for n in (1, 2, 4):
        announcement_mark_read(user=users[n], announcement_id=a.pk)

    first = insight.announcement_non_readers(announcement=a, platform="user", limit=2)
    assert [name for _, name in first.users] == ["u00", "u03"]
    assert first.next_after == users[3].pk
    second = insight.announcement_non_readers(announcement=a, platform="user", after_id=first.next_after, limit=2)
    assert [name for _, name in second.users] == ["u05"]
    assert second.next_after is None

    customers = insight.announcement_non_readers(announcement=a, platform="customer")
    assert [name for _, name in customers.users] == ["u06"]
    assert insight.announcement_non_readers(announcement=a, platform="operator").users == []


def test_non_readers_walk_past_batches_of_readers(clock: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(insight, "_SCAN_BATCH", 2)
    a = announce(["user"], publish_at=NOW - timedelta(hours=1))
    users = [UserFactory(username=f"r{n}") for n in range(5)]
    for user in users[:4]:
        announcement_mark_read(user=user, announcement_id=a.pk)
    page = insight.announcement_non_readers(announcement=a, platform="user")
    assert page.users == [(users[4].pk, "r4")]
    assert page.next_after is None


def test_read_bits_batch(clock: Any) -> None:
    a = announce(["user"], publish_at=NOW - timedelta(hours=1))
    users = [UserFactory() for _ in range(3)]
    announcement_mark_read(user=users[1], announcement_id=a.pk)
    bits = readmodel.read_bits(platform="user", announcement_id=a.pk, user_ids=[u.pk for u in users])
    assert bits == [False, True, False]
    assert readmodel.read_bits(platform="user", announcement_id=a.pk, user_ids=[]) == []


def test_admin_insight_page(clock: Any, operator: Any) -> None:
    a = announce(["user"], publish_at=NOW - timedelta(hours=1), title="Terms")
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    announcement_mark_read(user=alice, announcement_id=a.pk)
    client = Client()
    client.force_login(operator)

    change = client.get(f"/admin/notices/announcement/{a.pk}/change/").content.decode()
    assert f"/admin/notices/announcement/{a.pk}/insight/" in change

    response = client.get(f"/admin/notices/announcement/{a.pk}/insight/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="read-rate-chart"' in html
    assert "<polyline" in html
    assert "2026-11-22 10:00" in html
    assert 'id="non-readers"' in html
    assert ">bob <" in html
    assert ">alice <" not in html
    assert "Compose message" in html
    assert f"(#{bob.pk})" in html


def test_admin_insight_page_needs_staff(recipient: Any) -> None:
    a = announce(["user"])
    client = Client()
    client.force_login(recipient)
    response = client.get(f"/admin/notices/announcement/{a.pk}/insight/")
    assert response.status_code == 302  # to the admin login
    assert "/admin/login/" in response["Location"]
