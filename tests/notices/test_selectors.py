"""Read use cases: targeting, scheduling, expiry, counts, lists, chunks, rebuilds."""

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from core.api.errors import NotFound, ValidationFailed
from core.redis import keyspace_flush
from notices import keys as notice_keys
from notices import readmodel
from notices.selectors import (
    announcement_counts,
    announcement_get,
    announcement_list,
    announcement_pinned_unread,
    announcement_stats,
)
from notices.services import announcement_delete, announcement_mark_read, announcement_update
from tests.factories import UserFactory
from tests.notices.conftest import HOUR, T0, announce, on_platforms, read_bit

pytestmark = pytest.mark.django_db(transaction=True)


def ids(page: Any) -> list[int]:
    return [item.announcement.pk for item in page.items]


def test_targeting_only_the_users_platforms(recipient: Any, outsider: Any) -> None:
    on_platforms(outsider, "customer")
    for_users = announce(["user"])
    for_customers = announce(["customer"])
    announce(["operator"])
    assert ids(announcement_list(user=recipient, limit=10, now=T0)) == [for_users.pk]
    assert ids(announcement_list(user=outsider, limit=10, now=T0)) == [for_customers.pk]
    with pytest.raises(NotFound):
        announcement_get(user=outsider, announcement_id=for_users.pk, now=T0)
    assert announcement_get(user=recipient, announcement_id=for_users.pk, now=T0).read is False


def test_scheduled_announcement_is_invisible_until_its_publish_time(recipient: Any) -> None:
    a = announce(["user"], publish_at=T0 + HOUR)
    assert announcement_counts(user=recipient, now=T0) == {"read": 0, "unread": 0}
    assert ids(announcement_list(user=recipient, limit=10, now=T0)) == []
    with pytest.raises(NotFound):
        announcement_get(user=recipient, announcement_id=a.pk, now=T0)
    # No job ran in between: time alone makes it visible.
    assert announcement_counts(user=recipient, now=T0 + HOUR) == {"read": 0, "unread": 1}
    assert ids(announcement_list(user=recipient, limit=10, now=T0 + HOUR)) == [a.pk]


def test_expired_announcement_disappears_exactly_at_expiry(recipient: Any) -> None:
    a = announce(["user"], expire_at=T0 + HOUR)
    announcement_mark_read(user=recipient, announcement_id=a.pk, now=T0)
    later = T0 + HOUR - timedelta(milliseconds=1)
    assert announcement_counts(user=recipient, now=later) == {"read": 1, "unread": 0}
    assert announcement_counts(user=recipient, now=T0 + HOUR) == {"read": 0, "unread": 0}
    with pytest.raises(NotFound):
        announcement_get(user=recipient, announcement_id=a.pk, now=T0 + HOUR)


def test_counts_and_read_flags(recipient: Any, other_recipient: Any) -> None:
    a, b, c = announce(["user"]), announce(["user"]), announce(["user"])
    announcement_mark_read(user=recipient, announcement_id=b.pk, now=T0)
    assert announcement_counts(user=recipient, now=T0) == {"read": 1, "unread": 2}
    assert announcement_counts(user=other_recipient, now=T0) == {"read": 0, "unread": 3}
    page = announcement_list(user=recipient, limit=10, now=T0)
    assert {item.announcement.pk: item.read for item in page.items} == {a.pk: False, b.pk: True, c.pk: False}


def test_multi_platform_user_sees_the_union_once(recipient: Any) -> None:
    on_platforms(recipient, "user", "customer")
    both = announce(["user", "customer"])
    only_customer = announce(["customer"])
    announce(["operator"])
    assert announcement_counts(user=recipient, now=T0) == {"read": 0, "unread": 2}
    assert sorted(ids(announcement_list(user=recipient, limit=10, now=T0))) == sorted([both.pk, only_customer.pk])
    announcement_mark_read(user=recipient, announcement_id=both.pk, now=T0)
    assert announcement_counts(user=recipient, now=T0) == {"read": 1, "unread": 1}


def test_read_on_one_platform_counts_as_read(recipient: Any, redis: Any) -> None:
    # A user who joined a second platform after reading: one set bit is enough.
    a = announce(["user", "customer"])
    announcement_mark_read(user=recipient, announcement_id=a.pk, now=T0)
    on_platforms(recipient, "user", "customer")
    assert read_bit("customer", a.pk, recipient.pk) is False
    assert announcement_counts(user=recipient, now=T0) == {"read": 1, "unread": 0}


def test_list_is_newest_first_and_cursor_pages_never_repeat_or_skip(recipient: Any) -> None:
    made = [announce(["user"], publish_at=T0 - i * HOUR, pinned=(i == 3)) for i in range(7)]
    # Two with the same publish time: id breaks the tie.
    twins = [announce(["user"], publish_at=T0 - 10 * HOUR) for _ in range(2)]
    expected = [a.pk for a in made] + sorted((t.pk for t in twins), reverse=True)
    seen: list[int] = []
    cursor = None
    while True:
        page = announcement_list(user=recipient, limit=3, cursor=cursor, now=T0)
        seen += ids(page)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
        # Something new arrives between pages: it is above the cursor, never in later pages.
        announce(["user"], publish_at=T0 - HOUR / 2)
    assert seen == expected


def test_forged_cursor_is_rejected(recipient: Any) -> None:
    with pytest.raises(ValidationFailed):
        announcement_list(user=recipient, limit=3, cursor="garbage", now=T0)


def test_counts_need_no_sql_when_caches_are_warm(recipient: Any) -> None:
    announce(["user"])
    announcement_counts(user=recipient, now=T0)  # warms the platform cache and id list
    with CaptureQueriesContext(connection) as queries:
        assert announcement_counts(user=recipient, now=T0) == {"read": 0, "unread": 1}
    assert len(queries) == 0


def test_counts_survive_a_flushed_redis_by_rebuilding_from_postgres(recipient: Any, redis: Any) -> None:
    a = announce(["user"])
    b = announce(["user"], publish_at=T0 + HOUR)
    assert announcement_counts(user=recipient, now=T0 + HOUR) == {"read": 0, "unread": 2}
    keyspace_flush()  # the in-process id list is now stale: the token check notices
    assert announcement_counts(user=recipient, now=T0 + HOUR) == {"read": 0, "unread": 2}
    chunk = readmodel.user_slot(recipient.pk)[0]
    assert {int(m) for m in redis.zrange(notice_keys.index("user", chunk), 0, -1)} == {a.pk, b.pk}


def test_a_change_made_elsewhere_is_seen_at_once(recipient: Any, redis: Any) -> None:
    a = announce(["user"])
    announce(["user"])
    assert announcement_counts(user=recipient, now=T0) == {"read": 0, "unread": 2}
    # Another process deletes one: this process's cached id list is stale now.
    cached = readmodel.ids_cache.copy()
    announcement_delete(announcement=a)
    assert readmodel.ids_cache.copy() != cached
    readmodel.ids_cache.update(cached)
    assert announcement_counts(user=recipient, now=T0) == {"read": 0, "unread": 1}


def test_an_announcement_published_elsewhere_opens_at_once(recipient: Any) -> None:
    """Another process publishes: this process's copy of the index lacks the
    new announcement, and asking for that one alone (no id the copy finds
    live) must still notice the copy is stale rather than answer 404."""
    a = announce(["user"])
    assert announcement_get(user=recipient, announcement_id=a.pk, now=T0).announcement == a
    cached = readmodel.ids_cache.copy()
    b = announce(["user"], title="Published elsewhere")
    readmodel.ids_cache.update(cached)  # what the other process's publish leaves here
    assert announcement_get(user=recipient, announcement_id=b.pk, now=T0).announcement == b
    readmodel.ids_cache.update(cached)
    assert ids(announcement_list(user=recipient, now=T0, limit=1)) == [b.pk]


@override_settings(MESSAGECENTER_NOTICE_CHUNK_USERS=8)
def test_bitmaps_are_chunked_by_user_id(redis: Any) -> None:
    low = UserFactory(id=3)
    high = UserFactory(id=8 * 5 + 2)
    a = announce(["user"])
    for user in (low, high):
        assert announcement_counts(user=user, now=T0) == {"read": 0, "unread": 1}
        announcement_mark_read(user=user, announcement_id=a.pk, now=T0)
        assert announcement_counts(user=user, now=T0) == {"read": 1, "unread": 0}
    assert read_bit("user", a.pk, 3) is True
    assert read_bit("user", a.pk, 8 * 5 + 2) is True
    # Bounded by its readers: a one-byte head (where its window starts) and one byte of bits.
    assert redis.strlen(notice_keys.bitmap("user", 5, a.pk)) == 2
    # The new chunk's index was built on first read and is kept in step from then on.
    b = announce(["user"])
    assert {int(m) for m in redis.zrange(notice_keys.index("user", 5), 0, -1)} == {a.pk, b.pk}
    assert announcement_stats(announcement=a)["by_platform"]["user"]["read"] == 2
    a_pk = a.pk
    announcement_delete(announcement=a)
    assert redis.exists(notice_keys.bitmap("user", 5, a_pk)) == 0
    assert announcement_counts(user=high, now=T0) == {"read": 0, "unread": 1}


def test_stats_per_platform(operator: Any, recipient: Any, other_recipient: Any, outsider: Any) -> None:
    on_platforms(outsider, "customer", "user")
    a = announce(["user", "customer"])
    for user in (recipient, other_recipient, outsider):
        announcement_mark_read(user=user, announcement_id=a.pk, now=T0)
    stats = announcement_stats(announcement=a)
    assert stats == {
        "read_total": 4,
        "by_platform": {
            "user": {"read": 3, "users": 3, "ratio": 1.0},
            "customer": {"read": 1, "users": 1, "ratio": 1.0},
        },
    }


def test_banner_lists_unread_pinned_live_ones(recipient: Any) -> None:
    from django.utils import timezone

    now = timezone.now()
    pinned = announce(["user"], pinned=True, publish_at=now - HOUR)
    announce(["user"], publish_at=now - HOUR)
    announce(["user"], pinned=True, publish_at=now + HOUR)
    assert announcement_pinned_unread(user=recipient) == [pinned]
    announcement_mark_read(user=recipient, announcement_id=pinned.pk)
    assert announcement_pinned_unread(user=recipient) == []


def test_updating_publish_time_moves_it_in_time(recipient: Any) -> None:
    a = announce(["user"])
    announcement_update(announcement=a, publish_at=T0 + 2 * HOUR)
    assert announcement_counts(user=recipient, now=T0 + HOUR) == {"read": 0, "unread": 0}
    assert announcement_counts(user=recipient, now=T0 + 2 * HOUR) == {"read": 0, "unread": 1}
