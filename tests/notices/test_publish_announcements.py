"""announcement_create's publish path: no savepoint, one statement for the
platform's entries, one round trip per built chunk after the revision."""

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core.api.errors import ValidationFailed
from core.local_cache import local_caches_clear
from core.redis import keyspace_flush
from notices import keys as notice_keys
from notices import readmodel
from notices.models import Announcement, AnnouncementPlatform
from notices.selectors import announcement_counts
from notices.services import announcement_create, announcement_mark_read
from tests.conftest import round_trips
from tests.notices.conftest import HOUR, T0, announce, on_platforms

pytestmark = pytest.mark.django_db(transaction=True)


def test_entries_are_the_live_announcements_to_the_millisecond() -> None:
    now = timezone.now()
    odd = timedelta(microseconds=999_999)  # flooring, not rounding
    first = announce(["user"], publish_at=T0 + odd)
    both = announce(
        ["user", "customer"], publish_at=T0 - timedelta(days=3, microseconds=1), expire_at=T0 + 2 * HOUR + odd
    )
    customer = announce(["customer"], publish_at=T0)
    expired = announce(["user"], publish_at=now - 2 * HOUR, expire_at=now + HOUR)
    Announcement.objects.filter(pk=expired.pk).update(expire_at=now - timedelta(seconds=1))
    soon = announce(["user"], publish_at=now - 2 * HOUR, expire_at=now + timedelta(seconds=30))
    before_epoch = announce(["user"], publish_at=T0.replace(year=1960, microsecond=1))
    t0_ms = int(T0.timestamp() * 1000)
    user = {pk: (p, e) for pk, p, e in readmodel._platform_entries("user")}
    assert set(user) == {first.pk, both.pk, soon.pk, before_epoch.pk}  # the expired one is left out
    assert user[first.pk] == (t0_ms + 999, None)
    assert user[both.pk] == (t0_ms - 3 * 86_400_000 - 1, t0_ms + 2 * 3_600_000 + 999)
    assert user[before_epoch.pk][0] == readmodel.to_ms(before_epoch.publish_at) < 0
    assert {pk for pk, _, _ in readmodel._platform_entries("customer")} == {both.pk, customer.pk}
    assert readmodel._platform_entries("operator") == []


@pytest.mark.not_on_cluster(reason="counts the round trips of a single Redis's connection pool")
def test_publish_has_no_savepoint_and_three_round_trips_on_a_built_chunk(
    recipient: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_platforms(recipient, "user")
    first = announce(["user"])
    with round_trips() as trips, CaptureQueriesContext(connection) as queries, transaction.atomic():
        second = announce(["user"], title="Second")
    statements = [q["sql"] for q in queries.captured_queries]
    assert not [s for s in statements if "SAVEPOINT" in s], statements
    # BEGIN, two INSERTs, the projection's record, the webhook endpoints that
    # take the event, COMMIT, then the record's DELETE: the new entry is added
    # after commit without reading the platform's entries again
    # (readmodel.platform_add).
    assert len(statements) == 7, statements
    # The revision and the chunk set (one pipeline), then one script call for the one chunk.
    # The index (two), then the platform's live broadcast.
    assert trips[0] == 3
    assert announcement_counts(user=recipient, now=T0 + HOUR) == {"read": 0, "unread": 2}
    assert {first.pk, second.pk} == {pk for pk, _, _ in readmodel._platform_entries("user")}


def test_a_chunk_never_built_is_restored_before_its_index_opens(
    recipient: Any, other_recipient: Any, redis: Any
) -> None:
    on_platforms(recipient, "user")
    on_platforms(other_recipient, "user")
    # A sync builds chunk 0 (and the chunks Redis lists): the reader must sit there.
    assert readmodel.user_slot(other_recipient.pk)[0] == 0, other_recipient.pk
    a = announce(["user"])
    announcement_mark_read(user=other_recipient, announcement_id=a.pk, now=T0)
    keyspace_flush()
    local_caches_clear()
    b = announce(["user"])  # the first sync after the loss builds the chunk
    assert redis.exists(notice_keys.meta("user", 0))
    assert readmodel.read_bits(platform="user", announcement_id=a.pk, user_ids=[other_recipient.pk]) == [True]
    assert announcement_counts(user=other_recipient, now=T0 + HOUR)["unread"] == 1
    assert announcement_counts(user=recipient, now=T0 + HOUR)["unread"] == 2
    assert {pk for pk, _, _ in readmodel._platform_entries("user")} == {a.pk, b.pk}


def test_the_sync_drops_bitmaps_on_a_chunk_never_built(redis: Any, recipient: Any) -> None:
    on_platforms(recipient, "user")
    a = announce(["user"])
    announcement_mark_read(user=recipient, announcement_id=a.pk, now=T0)
    keyspace_flush()
    redis.set(notice_keys.bitmap("user", 0, a.pk), b"\xff")  # left over without an index
    local_caches_clear()
    pk = a.pk
    a.delete()
    assert not redis.exists(notice_keys.bitmap("user", 0, pk))
    assert redis.exists(notice_keys.meta("user", 0))


def test_a_validation_error_leaves_the_callers_transaction_usable(recipient: Any) -> None:
    with transaction.atomic():
        kept = announce(["user"], title="Kept")
        with pytest.raises(ValidationFailed):
            announcement_create(author=None, title=" ", body_html="<p>x</p>", platforms=["user"])
        assert Announcement.objects.filter(pk=kept.pk).exists()
    assert Announcement.objects.filter(pk=kept.pk).exists()


def test_a_failed_write_writes_nothing(monkeypatch: pytest.MonkeyPatch, redis: Any) -> None:
    def broken(**kwargs: Any) -> Any:
        raise RuntimeError("insert failed")

    monkeypatch.setattr(AnnouncementPlatform.objects, "create", broken)
    with pytest.raises(RuntimeError, match="insert failed"):
        announce(["user"])
    assert not Announcement.objects.exists()
    assert not redis.exists(notice_keys.index("user", 0))
