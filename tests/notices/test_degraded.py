"""With Redis down, lists and details still answer from PostgreSQL; marks are
accepted into the outbox and replayed into Redis once it is back."""

from datetime import timedelta
from io import StringIO
from typing import Any
from unittest import mock

import pytest
from django.core.management import call_command
from django.utils import timezone
from redis.exceptions import ConnectionError as RedisConnectionError

from core.redis import keyspace_flush
from durability import outbox
from durability.models import OutboxEntry
from notices import keys as notice_keys
from notices import readmodel
from tests.conftest import assert_error
from tests.notices.conftest import announce

pytestmark = pytest.mark.django_db(transaction=True)


def test_redis_down_lists_and_details_fall_back(recipient: Any, recipient_client: Any, operator_client: Any) -> None:
    a = announce(["user"], publish_at=timezone.now() - timedelta(hours=1))
    announce(["customer"], publish_at=timezone.now() - timedelta(hours=1))
    down = mock.patch("notices.readmodel.get_redis", side_effect=RedisConnectionError("down"))
    with down:
        listed = recipient_client.get("/api/v1/announcements/")
        assert listed.status_code == 200
        assert [(r["id"], r["read"]) for r in listed.json()["results"]] == [(str(a.pk), False)]
        assert recipient_client.get(f"/api/v1/announcements/{a.pk}/").status_code == 200
        assert recipient_client.get("/api/v1/announcements/counts/").json() == {"read": 0, "unread": 1}
        # The mark is accepted (PostgreSQL says it is live to the user) and shows at once.
        assert recipient_client.post(f"/api/v1/announcements/{a.pk}/read/").status_code == 204
        assert recipient_client.get("/api/v1/announcements/counts/").json() == {"read": 1, "unread": 0}
        assert recipient_client.get(f"/api/v1/announcements/{a.pk}/").json()["read"] is True
        entry = OutboxEntry.objects.get(topic="notices.read")
        assert entry.user_id == recipient.pk
        assert entry.payload["announcement_id"] == a.pk
        assert entry.payload["platforms"] == ["user"]
        assert entry.payload["read"] is True
        assert isinstance(entry.payload["at_ms"], int)
        assert_error(operator_client.get(f"/api/v1/manage/announcements/{a.pk}/stats/"), 503, "unavailable")
        # Writes to PostgreSQL still succeed; the outbox keeps the index sync.
        response = operator_client.post(
            "/api/v1/manage/announcements/",
            {"title": "t", "body_html": "<p>b</p>", "platforms": ["user"]},
            format="json",
        )
        assert response.status_code == 201
        assert OutboxEntry.objects.filter(topic="notices.platform_sync").exists()
        assert outbox.replay() == 0  # still down: nothing applied, nothing lost
    # Redis is back: the replay (the beat job) brings the index and the mark up to date.
    pending = OutboxEntry.objects.count()
    assert pending >= 2
    assert outbox.replay() == pending
    assert not OutboxEntry.objects.exists()
    assert recipient_client.get("/api/v1/announcements/counts/").json() == {"read": 1, "unread": 1}
    assert readmodel.read_bits(platform="user", announcement_id=a.pk, user_ids=[recipient.pk]) == [True]


def test_failed_sync_is_recorded_in_the_outbox() -> None:
    with mock.patch("notices.readmodel.platform_sync", side_effect=RedisConnectionError("down")):
        a = announce(["user"])
    entry = OutboxEntry.objects.get()
    assert (entry.topic, entry.payload, entry.user_id) == (
        "notices.platform_sync",
        {"platform": "user", "drop_ids": []},
        None,
    )
    assert a.pk


def test_rebuild_command_restores_the_indexes(redis: Any) -> None:
    a = announce(["user", "customer"])
    keyspace_flush()
    call_command("notices_rebuild", stdout=StringIO())
    assert redis.zscore(notice_keys.index("user", 0), a.pk) is not None
    assert redis.zscore(notice_keys.index("customer", 0), a.pk) is not None


def test_degraded_read_flags_are_the_committed_rows(recipient: Any, other_recipient: Any) -> None:
    from notices import selectors, services
    from notices.models import AnnouncementRead
    from tests.notices.conftest import on_platforms

    on_platforms(recipient, "user", "customer")
    hour_ago = timezone.now() - timedelta(hours=1)
    both = announce(["user", "customer"], publish_at=hour_ago, pinned=True)
    customer = announce(["customer"], publish_at=hour_ago + timedelta(minutes=1), pinned=True)
    user_only = announce(["user"], publish_at=hour_ago + timedelta(minutes=2))
    dropped = announce(["user"], publish_at=hour_ago + timedelta(minutes=3))
    # Read on one platform is read; a row of a platform the announcement no
    # longer targets (or of someone else) says nothing about this user.
    for announcement in (both, customer, dropped):
        AnnouncementRead.objects.create(announcement=announcement, platform="customer", user=recipient)
        AnnouncementRead.objects.create(announcement=announcement, platform="customer", user=other_recipient)
    AnnouncementRead.objects.create(announcement=user_only, platform="user", user=other_recipient)
    with mock.patch("notices.readmodel.get_redis", side_effect=RedisConnectionError("down")):
        recipient = type(recipient).objects.get(pk=recipient.pk)  # no memoised platforms
        flags = {
            item.announcement.pk: item.read for item in selectors.announcement_list(user=recipient, limit=10).items
        }
        assert flags == {both.pk: True, customer.pk: True, user_only.pk: False, dropped.pk: False}
        # Marks made meanwhile, committed in order: the last one wins.
        assert services.announcement_mark_unread(user=recipient, announcement_id=customer.pk) is True
        assert services.announcement_mark_read(user=recipient, announcement_id=user_only.pk) is True
        assert services.announcement_mark_read(user=recipient, announcement_id=user_only.pk) is False
        assert services.announcement_mark_unread(user=recipient, announcement_id=dropped.pk) is False
        assert services.announcement_mark_unread(user=recipient, announcement_id=both.pk) is True
        assert services.announcement_mark_read(user=recipient, announcement_id=both.pk) is True
        assert selectors.announcement_counts(user=recipient) == {"read": 2, "unread": 2}
        assert selectors.announcement_get(user=recipient, announcement_id=customer.pk).read is False
        assert [(i.announcement.pk, i.read) for i in selectors.announcement_pinned(user=recipient)] == [
            (customer.pk, False),
            (both.pk, True),
        ]
        assert [a.pk for a in selectors.announcement_pinned_unread(user=recipient)] == [customer.pk]
