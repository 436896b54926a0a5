"""The list's summaries of announcements (title, summary, publish time, pin)
come from read-through entries in Redis: a warm list page runs no SQL, and
every change of those fields, or a deletion, is seen by the next list."""

from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
from django.utils import timezone
from redis.exceptions import ConnectionError as RedisConnectionError

from core.readthrough import parse
from durability import outbox
from durability.models import OutboxEntry
from notices import keys as notice_keys
from notices.selectors import AnnouncementSummary, announcement_summaries
from notices.services import announcement_delete, announcement_update
from tests.notices.conftest import announce

pytestmark = pytest.mark.django_db(transaction=True)

HOUR = timedelta(hours=1)


def live(**kwargs: Any) -> Any:
    return announce(["user"], publish_at=timezone.now() - HOUR, **kwargs)


def listed(client: Any) -> list[dict[str, Any]]:
    response = client.get("/api/v1/announcements/")
    assert response.status_code == 200
    return list(response.json()["results"])


def test_a_warm_list_page_runs_no_sql(recipient_client: Any, django_assert_num_queries: Any) -> None:
    for title in ("one", "two", "three"):
        live(title=title)
    listed(recipient_client)  # warms auth, platforms, the index copy and the summaries
    with django_assert_num_queries(0):
        assert [item["title"] for item in listed(recipient_client)] == ["three", "two", "one"]


def test_every_change_a_list_shows_is_seen_by_the_next_list(recipient_client: Any) -> None:
    a = live(title="Before", pinned=False)
    [item] = listed(recipient_client)
    assert (item["title"], item["pinned"]) == ("Before", False)
    announcement_update(announcement=a, title="After")
    assert listed(recipient_client)[0]["title"] == "After"
    announcement_update(announcement=a, summary="A new summary", pinned=True)
    [item] = listed(recipient_client)
    assert (item["summary"], item["pinned"]) == ("A new summary", True)
    moved = timezone.now() - 2 * HOUR
    announcement_update(announcement=a, publish_at=moved)
    a.refresh_from_db()
    assert listed(recipient_client)[0]["published_at"] == a.publish_at.isoformat()
    announcement_delete(announcement=a)
    assert listed(recipient_client) == []


def test_a_body_only_edit_keeps_the_cached_summary(recipient_client: Any, redis: Any) -> None:
    a = live(title="Kept", body_html="<p>Long body</p>")
    announcement_update(announcement=a, summary="Written summary")  # not derived: a new body keeps it
    listed(recipient_client)
    cached = redis.get(notice_keys.summary(a.pk))
    assert parse(cached).value is not None
    announcement_update(announcement=a, body_html="<p>Another body</p>")
    assert redis.get(notice_keys.summary(a.pk)) == cached


def test_a_summary_round_trips_with_the_row_s_microseconds() -> None:
    a = live(title="Exact")
    a.publish_at = a.publish_at.replace(microsecond=123_456)
    a.save()
    a.refresh_from_db()
    row = AnnouncementSummary.of(a)
    assert AnnouncementSummary.from_entry(a.pk, row.to_entry()) == row
    assert announcement_summaries(announcement_ids=[a.pk]) == {a.pk: row}  # filled from PostgreSQL
    assert announcement_summaries(announcement_ids=[a.pk]) == {a.pk: row}  # read from its entry


def test_a_drop_redis_refused_waits_in_the_outbox(recipient_client: Any, redis: Any) -> None:
    a = live(title="Before")
    listed(recipient_client)
    with mock.patch("core.readmodel.cache_invalidate", side_effect=RedisConnectionError("down")):
        announcement_update(announcement=a, title="After")
    entry = OutboxEntry.objects.get(topic="notices.summary_drop")
    assert entry.payload == {"ids": [a.pk]}
    assert listed(recipient_client)[0]["title"] == "Before"  # the entry still holds the old copy
    assert outbox.replay() == 1
    assert listed(recipient_client)[0]["title"] == "After"
