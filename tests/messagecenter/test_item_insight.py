"""Operator insight into messages and bulletins: first reads are counted once per
user and per hour (read/unread/read and repeated read-all never double count),
and the admin shows delivered, read, the ratio and the read-rate chart."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client

from insight.reports import READ_HOURS_TTL_SECONDS, hour_of
from messagecenter import keys as mc_keys
from messagecenter import services
from messagecenter.insight import bulletin_read_stats, message_read_stats
from messagecenter.readmodel import reads
from messagecenter.readmodel.entries import to_ms
from messagecenter.selectors import inbox_counts
from tests.factories import UserFactory
from tests.messagecenter.conftest import make_group, send

pytestmark = pytest.mark.django_db(transaction=True)


def _hours(ref: str) -> dict[datetime, int]:
    services.inbox_first_reads_fold()  # as the chart does before it reads
    return reads.read_hours(ref=ref)


def test_read_unread_read_counts_one_first_read(operator: Any, recipient: Any, clock: Any, redis: Any) -> None:
    message = send(operator, to={"users": [recipient]})
    services.inbox_mark_read(user=recipient, item_id=message.ref)
    services.inbox_mark_unread(user=recipient, item_id=message.ref)
    services.inbox_mark_read(user=recipient, item_id=message.ref)
    services.inbox_mark_read(user=recipient, item_id=message.ref)
    assert _hours(message.ref) == {datetime(2026, 11, 22, 10, tzinfo=UTC): 1}
    # Unread then "read all" is not a first read either.
    services.inbox_mark_unread(user=recipient, item_id=message.ref)
    assert services.inbox_mark_all_read(user=recipient) == 1
    assert message_read_stats(message=message).read == 1
    ttl = redis.ttl(mc_keys.item_read_hours(message.ref))
    assert 0 < ttl <= READ_HOURS_TTL_SECONDS


def test_read_all_counts_each_newly_read_item_once(
    operator: Any, recipient: Any, other_recipient: Any, clock: Any
) -> None:
    first = send(operator, to={"users": [recipient, other_recipient]}, title="One")
    second = send(operator, to={"users": [recipient, other_recipient]}, title="Two")
    services.inbox_mark_read(user=recipient, item_id=first.ref)
    clock.advance(hours=2)
    assert services.inbox_mark_all_read(user=recipient) == 1  # only the second was unread
    assert services.inbox_mark_all_read(user=recipient) == 0  # a repeat counts nothing
    assert services.inbox_mark_all_read(user=other_recipient) == 2
    assert message_read_stats(message=first).read == 2
    assert message_read_stats(message=second).read == 2
    ten, noon = datetime(2026, 11, 22, 10, tzinfo=UTC), datetime(2026, 11, 22, 12, tzinfo=UTC)
    assert _hours(first.ref) == {ten: 1, noon: 1}
    assert _hours(second.ref) == {noon: 2}


def test_hourly_buckets_and_timeline(operator: Any, clock: Any) -> None:
    users = [UserFactory() for _ in range(4)]
    message = send(operator, to={"users": users})
    start = clock.now
    for i, user in enumerate(users):
        clock.now = start + timedelta(minutes=50 * i)  # 10:00, 10:50, 11:40, 12:30
        services.inbox_mark_read(user=user, item_id=message.ref)
    stats = message_read_stats(message=message)
    assert [(p.hour.hour, p.reads, p.cumulative) for p in stats.timeline] == [(10, 2, 2), (11, 1, 3), (12, 1, 4)]
    assert (stats.audience, stats.read, stats.ratio) == (4, 4, 1.0)
    assert hour_of(to_ms(start + timedelta(minutes=59))) == hour_of(to_ms(start))


def test_bulletin_first_reads_and_audience(operator: Any, recipient: Any, other_recipient: Any, clock: Any) -> None:
    group = make_group("vip", recipient, other_recipient)
    bulletin = services.bulletin_create(
        title="Maintenance",
        body_html="<p>Tonight</p>",
        display_time=clock.now - timedelta(minutes=1),
        expire_at=None,
        group_ids=[group.pk],
        actor=operator,
    )
    services.inbox_mark_read(user=recipient, item_id=bulletin.ref)
    services.inbox_mark_unread(user=recipient, item_id=bulletin.ref)
    services.inbox_mark_all_read(user=recipient)
    stats = bulletin_read_stats(bulletin=bulletin)
    assert (stats.audience, stats.read, stats.ratio, stats.pushed) == (2, 1, 0.5, None)
    everyone = services.bulletin_create(
        title="All",
        body_html="<p>x</p>",
        display_time=clock.now - timedelta(minutes=1),
        expire_at=None,
        group_ids=[],
        actor=operator,
    )
    assert bulletin_read_stats(bulletin=everyone).audience == 3  # every active user (operator included)


@pytest.fixture
def admin_client(operator: Any) -> Client:
    client = Client()
    client.force_login(operator)
    return client


def test_admin_message_insight_shows_figures(
    admin_client: Client, operator: Any, recipient: Any, other_recipient: Any, clock: Any
) -> None:
    message = send(operator, to={"users": [recipient, other_recipient]})
    services.inbox_mark_read(user=recipient, item_id=message.ref)
    change = admin_client.get(f"/admin/messagecenter/message/{message.pk}/change/").content.decode()
    assert "Read statistics" in change
    assert "50.0%" in change
    insight_url = f"/admin/messagecenter/message/{message.pk}/insight/"
    assert insight_url in change
    response = admin_client.get(insight_url)
    assert response.status_code == 200
    html = response.content.decode()
    assert '<td id="stat-audience">2</td>' in html
    assert '<td id="stat-pushed">2 / 2</td>' in html
    assert '<td id="stat-read">1</td>' in html
    assert '<td id="stat-ratio">50 %</td>' in html
    assert 'id="read-rate-chart"' in html
    assert "<td>2026-11-22 10:00</td><td>1</td><td>1</td>" in html


def test_admin_bulletin_insight_renders(admin_client: Client, operator: Any, recipient: Any, clock: Any) -> None:
    bulletin = services.bulletin_create(
        title="Hello",
        body_html="<p>x</p>",
        display_time=clock.now - timedelta(minutes=1),
        expire_at=None,
        group_ids=[make_group("vip", recipient).pk],
        actor=operator,
    )
    change = admin_client.get(f"/admin/messagecenter/bulletin/{bulletin.pk}/change/").content.decode()
    assert "Read statistics" in change
    assert f"/admin/messagecenter/bulletin/{bulletin.pk}/insight/" in change
    html = admin_client.get(f"/admin/messagecenter/bulletin/{bulletin.pk}/insight/").content.decode()
    assert '<td id="stat-read">0</td>' in html
    assert "Nobody has read it yet." in html
    services.inbox_mark_read(user=recipient, item_id=bulletin.ref)
    html = admin_client.get(f"/admin/messagecenter/bulletin/{bulletin.pk}/insight/").content.decode()
    assert '<td id="stat-audience">1</td>' in html
    assert '<td id="stat-read">1</td>' in html
    assert '<td id="stat-ratio">100 %</td>' in html
    assert 'id="read-rate-chart"' in html
    assert admin_client.get("/admin/messagecenter/bulletin/999999/insight/").status_code == 404


def test_non_staff_cannot_see_insight(operator: Any, recipient: Any, clock: Any) -> None:
    message = send(operator, to={"users": [recipient]})
    services.inbox_mark_read(user=recipient, item_id=message.ref)
    client = Client()
    client.force_login(recipient)
    for url in (
        f"/admin/messagecenter/message/{message.pk}/insight/",
        f"/admin/messagecenter/message/{message.pk}/change/",
    ):
        response = client.get(url)
        assert response.status_code == 302
        assert "/admin/login/" in response["Location"]
        assert "stat-read" not in response.content.decode()
    assert Client().get(f"/admin/messagecenter/message/{message.pk}/insight/").status_code == 302


def test_statistics_failure_does_not_fail_the_read(
    operator: Any, recipient: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from redis.exceptions import ConnectionError as RedisConnectionError

    message = send(operator, to={"users": [recipient]})

    class _BrokenPipe:
        def rpush(self, *args: Any) -> None: ...  # the first reads, written behind
        def execute(self) -> None:
            raise RedisConnectionError("down")

    class _Client:
        def pipeline(self, **kwargs: Any) -> _BrokenPipe:
            return _BrokenPipe()

    monkeypatch.setattr(reads, "get_redis", lambda: _Client())
    assert services.inbox_mark_read(user=recipient, item_id=message.ref) is True
    assert inbox_counts(user=recipient)["unread"] == 0


def test_read_script_keys_share_one_cluster_slot() -> None:
    from redis.crc import key_slot

    from messagecenter.readmodel.scripts import MarkOp, ReadAllOp, inbox_call

    months = ["202611", "202612"]
    for op in (MarkOp(member="m1|system|202611|1", read=True, hour=0), ReadAllOp(category="", time_max=None, hour=0)):
        script_keys = inbox_call(op, user_id=42, now_ms=0, months=months).keys
        assert {mc_keys.read_ever_bitmap(42, m) for m in months} <= set(script_keys)
        assert len({key_slot(k.encode()) for k in script_keys}) == 1


@pytest.mark.cluster
def test_first_reads_on_a_real_cluster(redis_cluster_url: str, operator: Any, clock: Any) -> None:
    import uuid

    from django.test import override_settings
    from redis.cluster import RedisCluster

    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    users = [UserFactory() for _ in range(3)]
    try:
        with override_settings(MESSAGECENTER_REDIS_CLUSTER_URL=redis_cluster_url, MESSAGECENTER_KEY_PREFIX=prefix):
            first = send(operator, to={"users": users}, title="One")
            second = send(operator, to={"users": users}, title="Two")
            services.inbox_mark_read(user=users[0], item_id=first.ref)
            services.inbox_mark_unread(user=users[0], item_id=first.ref)
            for user in users:
                services.inbox_mark_all_read(user=user)
            assert message_read_stats(message=first).read == 3
            assert message_read_stats(message=second).read == 3
    finally:
        probe = RedisCluster.from_url(redis_cluster_url, socket_connect_timeout=0.3)
        for node in probe.get_primaries():
            client = probe.get_redis_connection(node)
            for key in client.scan_iter(match=f"{prefix}*", count=1000):
                client.delete(key)
        probe.close()


def test_first_reads_are_written_behind_in_one_entry_per_mark(
    operator: Any, recipient: Any, clock: Any, redis: Any
) -> None:
    messages = [send(operator, to={"users": [recipient]}, title=f"m{i}") for i in range(5)]
    assert services.inbox_mark_all_read(user=recipient) == 5
    # One list entry for the five first reads; no per-item counter written yet.
    assert redis.llen(mc_keys.first_reads_pending()) == 1
    assert all(redis.exists(mc_keys.item_read_hours(m.ref)) == 0 for m in messages)
    assert services.inbox_first_reads_fold() == 1
    assert redis.llen(mc_keys.first_reads_pending()) == 0
    ten = datetime(2026, 11, 22, 10, tzinfo=UTC)
    assert all(_hours(m.ref) == {ten: 1} for m in messages)
    assert services.inbox_first_reads_fold() == 0  # folding again counts nothing twice
    assert all(_hours(m.ref) == {ten: 1} for m in messages)
