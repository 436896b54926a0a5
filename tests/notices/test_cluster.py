"""The announcement read model on a real Redis Cluster (slot discipline that
fakeredis cannot check). Needs a cluster: MESSAGECENTER_TEST_CLUSTER_URL, or
the local six-node one on port 7000, started by the session fixture."""

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings
from redis.cluster import RedisCluster

from core.redis import get_redis
from notices.selectors import announcement_counts, announcement_list, announcement_stats
from notices.services import announcement_delete, announcement_mark_read, announcement_mark_unread
from tests.factories import UserFactory
from tests.notices.conftest import HOUR, T0, announce, on_platforms

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster]


@pytest.fixture
def cluster(redis_cluster_url: str) -> Iterator[Any]:
    probe = RedisCluster.from_url(redis_cluster_url, socket_connect_timeout=0.3)
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    with override_settings(
        MESSAGECENTER_REDIS_CLUSTER_URL=redis_cluster_url,
        MESSAGECENTER_KEY_PREFIX=prefix,
        MESSAGECENTER_NOTICE_CHUNK_USERS=4,
    ):
        yield get_redis()
    # A shared cluster: remove only this test's keys.
    for node in probe.get_primaries():
        client = probe.get_redis_connection(node)
        for key in client.scan_iter(match=f"{prefix}*", count=1000):
            client.delete(key)  # one by one: a multi-key DEL must stay in one slot
    probe.close()


def test_read_model_runs_on_a_real_cluster(cluster: Any) -> None:
    assert isinstance(cluster, RedisCluster)
    low, high = UserFactory(id=1), UserFactory(id=4 * 7 + 3)
    for user in (low, high):
        on_platforms(user, "user", "customer")
    a = announce(["user", "customer"], expire_at=T0 + HOUR)
    b = announce(["customer"], publish_at=T0 - HOUR)
    for user in (low, high):
        assert announcement_counts(user=user, now=T0) == {"read": 0, "unread": 2}
        announcement_mark_read(user=user, announcement_id=a.pk, now=T0)
        announcement_mark_read(user=user, announcement_id=b.pk, now=T0)
        announcement_mark_unread(user=user, announcement_id=b.pk, now=T0)
        assert announcement_counts(user=user, now=T0) == {"read": 1, "unread": 1}
        page = announcement_list(user=user, limit=10, now=T0)
        assert {i.announcement.pk: i.read for i in page.items} == {a.pk: True, b.pk: False}
    assert announcement_stats(announcement=a)["by_platform"]["user"]["read"] == 2
    announcement_delete(announcement=b)
    assert announcement_counts(user=high, now=T0) == {"read": 1, "unread": 0}


def test_read_counters_on_a_real_cluster(cluster: Any) -> None:
    """One platform: counts from the user's counter, the chunk time moved on by
    advance.lua, an expiry and a delete moving every reader's counter."""
    users = [on_platforms(UserFactory(id=pk), "user") for pk in (2, 4 * 9 + 1)]
    short = announce(["user"], publish_at=T0, expire_at=T0 + HOUR)
    long = announce(["user"], publish_at=T0 - HOUR)
    for user in users:
        assert announcement_counts(user=user, now=T0) == {"read": 0, "unread": 2}
        announcement_mark_read(user=user, announcement_id=short.pk, now=T0)
        announcement_mark_read(user=user, announcement_id=long.pk, now=T0)
        assert announcement_counts(user=user, now=T0) == {"read": 2, "unread": 0}
        assert announcement_counts(user=user, now=T0 + 2 * HOUR) == {"read": 1, "unread": 0}
    announcement_delete(announcement=long)
    for user in users:
        assert announcement_counts(user=user, now=T0 + 2 * HOUR) == {"read": 0, "unread": 0}
        assert announcement_counts(user=user, now=T0) == {"read": 1, "unread": 0}
