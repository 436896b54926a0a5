"""Activity bitmaps: recorded once per user, process and day; DAU / WAU / MAU and
retention equal a brute-force count over random activity (real Redis, and the
test cluster); readers of an item over time; the staff dashboard and its CSV;
Redis down never fails a request."""

import csv
import io
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
import redis as redis_lib
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyroaring import BitMap
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster, key_slot
from redis.retry import Retry

import core.lua
from core.local_cache import local_caches_clear
from core.redis import get_redis
from insight import activity, readmodel
from insight import keys as insight_keys
from messagecenter import services as mc_services
from notices.services import announcement_mark_read
from tests.conftest import client_for, flush_redis
from tests.factories import UserFactory
from tests.notices.conftest import announce

pytestmark = pytest.mark.django_db(transaction=True)

END = date(2026, 3, 31)
CHUNK = 64  # small chunks: the random users span several, as millions of users would
MAX_USER = 300


def at(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, 12, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _fresh_memory() -> Iterator[None]:
    activity.forget_marked()
    yield
    activity.forget_marked()


def test_a_user_costs_one_command_per_day_then_none(redis: Any, monkeypatch: Any) -> None:
    sent: list[dict[str, Any]] = []
    real_mark = readmodel.activity_mark

    def mark(**kwargs: Any) -> None:
        sent.append(kwargs)
        real_mark(**kwargs)

    monkeypatch.setattr(readmodel, "activity_mark", mark)
    day = at(END)
    assert activity.record_active(user_id=42, now=day)
    assert not activity.record_active(user_id=42, now=day + timedelta(hours=3))
    assert len(sent) == 1
    name = insight_keys.activity_day(0, "20260331")
    assert redis.getbit(name, 42) == 1
    assert 0 < redis.ttl(name) <= 400 * 86_400
    assert activity.record_active(user_id=42, now=day + timedelta(days=1))  # a new day: one more
    assert len(sent) == 2


def test_authenticated_requests_are_recorded(recipient: Any, redis: Any) -> None:
    client = client_for(recipient)
    assert client.get("/api/v1/me/").status_code == 200
    today = activity.day_name(activity.today())
    chunk, offset = divmod(recipient.pk, int(activity._chunk_size()))
    assert redis.getbit(insight_keys.activity_day(chunk, today), offset) == 1
    assert activity.activity_series(end=activity.today(), days=1)[0].dau == 1


def test_redis_down_never_fails_a_request(recipient: Any, monkeypatch: Any) -> None:
    dead = redis_lib.Redis(
        host="127.0.0.1", port=1, socket_connect_timeout=0.2, socket_timeout=0.2, retry=Retry(NoBackoff(), 0)
    )
    for module in (core.lua, readmodel):
        monkeypatch.setattr(module, "get_redis", lambda: dead)
    assert activity.record_active(user_id=recipient.pk) is True  # tried, failed quietly
    assert client_for(recipient).get("/api/v1/me/").status_code == 200


# --- figures against a brute-force count --------------------------------------------------

activity_days = st.dictionaries(
    st.integers(0, 45),  # days before END
    st.sets(st.integers(0, MAX_USER), max_size=40),
    max_size=20,
)


def brute_force(active: dict[date, set[int]], day: date, window: int) -> int:
    users: set[int] = set()
    for back in range(window):
        users |= active.get(day - timedelta(days=back), set())
    return len(users)


def check_figures(active_by_offset: dict[int, set[int]]) -> None:
    activity.forget_marked()
    active = {END - timedelta(days=offset): users for offset, users in active_by_offset.items()}
    for day, users in active.items():
        for user_id in users:
            activity.record_active(user_id=user_id, now=at(day))
    series = activity.activity_series(end=END, days=10, max_user_id=MAX_USER)
    for point in series:
        assert point.dau == len(active.get(point.day, set()))
        assert point.wau == brute_force(active, point.day, 7)
        assert point.mau == brute_force(active, point.day, 30)
    for row in activity.retention(end=END, days=40, offsets=(1, 7, 30), max_user_id=MAX_USER):
        first = active.get(row.day, set())
        assert row.active == len(first)
        for offset in (1, 7, 30):
            later = row.day + timedelta(days=offset)
            expected = None if later > END else len(first & active.get(later, set()))
            assert row.kept[offset] == expected


@override_settings(MESSAGECENTER_BITMAP_CHUNK_USERS=CHUNK)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(active_by_offset=activity_days)
def test_figures_equal_a_brute_force_count(active_by_offset: dict[int, set[int]]) -> None:
    flush_redis()
    check_figures(active_by_offset)


@pytest.mark.cluster
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(active_by_offset=activity_days)
def test_figures_on_a_real_cluster(redis_cluster_url: str, active_by_offset: dict[int, set[int]]) -> None:
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    try:
        with override_settings(
            MESSAGECENTER_REDIS_CLUSTER_URL=redis_cluster_url,
            MESSAGECENTER_KEY_PREFIX=prefix,
            MESSAGECENTER_BITMAP_CHUNK_USERS=CHUNK,
        ):
            assert isinstance(get_redis(), RedisCluster)
            check_figures(active_by_offset)
    finally:
        probe = RedisCluster.from_url(redis_cluster_url, socket_connect_timeout=0.3)
        for node in probe.get_primaries():
            client = probe.get_redis_connection(node)
            for key in client.scan_iter(match=f"{prefix}*", count=1000):
                client.delete(key)
        probe.close()


def test_keys_of_one_bitop_share_a_slot() -> None:
    days = [insight_keys.activity_day(3, f"202603{d:02d}") for d in range(1, 31)]
    slots = {key_slot(name.encode()) for name in [*days, insight_keys.activity_scratch(3, "x")]}
    assert len(slots) == 1
    assert key_slot(insight_keys.activity_day(3, "20260301").encode()) != key_slot(
        insight_keys.activity_day(4, "20260301").encode()
    )


# --- readers of an item over time -----------------------------------------------------------


@override_settings(MESSAGECENTER_BITMAP_CHUNK_USERS=4)
def test_readers_of_an_announcement_over_time(operator: Any) -> None:
    local_caches_clear()
    readers = [UserFactory() for _ in range(5)]
    others = [UserFactory() for _ in range(2)]
    now = datetime.now(UTC)
    announcement = announce(["user"], author=operator, publish_at=now - timedelta(hours=1))
    for user in readers:
        announcement_mark_read(user=user, announcement_id=announcement.pk)  # first reads counted now
    today = now.date()
    # Active yesterday: three readers and one non-reader; today: one reader; tomorrow: nobody yet.
    for user in [*readers[:3], others[0]]:
        activity.record_active(user_id=user.pk, now=at(today - timedelta(days=1)))
    activity.record_active(user_id=readers[4].pk, now=now)
    source = activity.reader_source("announcement")
    assert source is not None
    days = activity.item_readers_by_day(source=source, item_id=announcement.pk, end=today + timedelta(days=1), days=3)
    assert [(d.first_reads, d.cumulative, d.active_readers) for d in days] == [(0, 0, 3), (5, 5, 1), (0, 5, 0)]


def test_message_readers_come_from_their_read_state(operator: Any) -> None:
    readers, other = [UserFactory() for _ in range(3)], UserFactory()
    message = mc_services.message_send(
        sender=operator, category="system", title="t", body_html="b", user_ids=[u.pk for u in [*readers, other]]
    )
    for user in readers:
        mc_services.inbox_mark_read(user=user, item_id=message.ref)
    source = activity.reader_source("message")
    assert source is not None
    assert source.readers(message.pk) == BitMap(u.pk for u in readers)
    assert source.readers(message.pk + 1000) is None  # no such message
    today = datetime.now(UTC).date()
    for user in [readers[0], other]:
        activity.record_active(user_id=user.pk)
    days = activity.item_readers_by_day(source=source, item_id=message.pk, end=today, days=1)
    assert [(d.first_reads, d.active_readers) for d in days] == [(3, 1)]


def test_bulletin_readers_per_day_equal_a_brute_force_count() -> None:
    """First reads spread over three days (one reader reads again later and
    marks it unread in between: still one first read), activity on four days,
    a non-member who is active but cannot read it."""
    members = [UserFactory() for _ in range(6)]
    outsider = UserFactory()
    group = mc_services.user_group_create(name="readers")
    mc_services.user_group_add_members(group=group, user_ids=[u.pk for u in members])
    now = datetime.now(UTC)
    today = now.date()
    bulletin = mc_services.bulletin_create(
        title="t", body_html="b", display_time=now - timedelta(days=4), group_ids=[group.pk]
    )
    first_read_on = {members[0]: 2, members[1]: 2, members[2]: 1, members[3]: 0}  # days before today
    for user, back in first_read_on.items():
        mc_services.inbox_mark_read(user=user, item_id=bulletin.ref, now=at(today - timedelta(days=back)))
    later = timedelta(hours=1)  # (noon of each day: the figures do not depend on when the test runs)
    mc_services.inbox_mark_unread(user=members[0], item_id=bulletin.ref, now=at(today - timedelta(days=1)) + later)
    mc_services.inbox_mark_read(user=members[0], item_id=bulletin.ref, now=at(today) + later)
    active_on = {  # days before today -> who was active
        3: {members[0], members[4]},
        2: {members[0], members[1], outsider},
        1: {members[1], members[2], members[3], members[5]},
        0: {members[2], members[3], members[4], outsider},
    }
    for back, users in active_on.items():
        for user in users:
            activity.record_active(user_id=user.pk, now=at(today - timedelta(days=back)))

    source = activity.reader_source("bulletin")
    assert source is not None
    assert source.exists(bulletin.pk)
    assert not source.exists(bulletin.pk + 1000)
    assert source.readers(bulletin.pk) == BitMap(u.pk for u in first_read_on)
    assert source.readers(bulletin.pk + 1000) is None  # no such bulletin
    days = activity.item_readers_by_day(source=source, item_id=bulletin.pk, end=today, days=5)

    readers = set(first_read_on)
    expected, cumulative = [], 0
    for back in range(4, -1, -1):
        first = sum(1 for b in first_read_on.values() if b == back)
        cumulative += first
        active = len(readers & active_on.get(back, set()))
        expected.append((today - timedelta(days=back), first, cumulative, active))
    assert [(d.day, d.first_reads, d.cumulative, d.active_readers) for d in days] == expected
    assert expected[-1][2] == 4  # the figures are not trivially empty


# --- the dashboard ---------------------------------------------------------------------------------


def _active_today(users: list[Any]) -> None:
    for user in users:
        activity.record_active(user_id=user.pk)


def test_dashboard_is_for_staff_only(recipient: Any) -> None:
    browser = client_for(recipient)
    browser.force_login(recipient)
    response = browser.get("/admin/activity/")
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]
    assert browser.get("/admin/activity.csv").status_code == 302


def test_dashboard_shows_the_chart_and_tables(admin_client: Any) -> None:
    users = [UserFactory() for _ in range(3)]
    _active_today(users)
    response = admin_client.get("/admin/activity/?days=7")
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="activity-chart"' in body
    assert body.count('class="activity-line"') == 3
    assert "<script" not in body.split('id="content-main"')[1]
    series = response.context["series"]
    assert len(series) == 7
    assert series[-1].dau >= 3  # (the admin's own request counts too)


def test_dashboard_reports_bad_input_and_keeps_working(admin_client: Any) -> None:
    body = admin_client.get("/admin/activity/?days=abc&kind=announcement&item=-3").content.decode()
    assert "days must be a whole number" in body
    assert "must be a positive whole number" in body
    body = admin_client.get("/admin/activity/?kind=announcement&item=99999999").content.decode()
    assert "There is no announcement 99999999" in body


def test_csv_carries_the_same_figures(admin_client: Any) -> None:
    _active_today([UserFactory() for _ in range(2)])
    response = admin_client.get("/admin/activity.csv?days=5")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == ["day", "dau", "wau", "mau", "retained_1d", "retained_7d", "retained_30d"]
    assert len(rows) == 6
    series = activity.activity_series(end=activity.today(), days=5)
    assert [[int(v) for v in row[1:4]] for row in rows[1:]] == [[p.dau, p.wau, p.mau] for p in series]
    assert rows[-1][4:] == ["", "", ""]  # today's retention is not known yet
