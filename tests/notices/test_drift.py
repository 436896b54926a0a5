"""check_redis's announcements area on the real Redis: every built chunk's index and
expiry zsets equal the platform's not-yet-expired announcements in PostgreSQL."""

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from core.redis import get_redis
from durability.drift import check_run, drift_checks
from notices import keys as notice_keys
from notices import readmodel
from notices.models import Announcement
from tests.notices.conftest import HOUR, T0, announce

pytestmark = pytest.mark.django_db(transaction=True)


def find() -> list[Any]:
    return drift_checks()["announcements"].find()


def index(platform: str, chunk: int = 0) -> dict[int, int]:
    return {int(m): int(s) for m, s in get_redis().zrange(notice_keys.index(platform, chunk), 0, -1, withscores=True)}


def expiry(platform: str, chunk: int = 0) -> dict[int, int]:
    return {int(m): int(s) for m, s in get_redis().zrange(notice_keys.expiry(platform, chunk), 0, -1, withscores=True)}


def test_clean_after_publishing() -> None:
    announce(["user", "operator"], expire_at=T0 + HOUR)
    announce(["customer"])
    assert find() == []


def test_removed_member_stale_id_and_wrong_expiry_found_and_repaired() -> None:
    kept = announce(["user"], expire_at=T0 + HOUR)
    other = announce(["user"])
    want_index, want_expiry = index("user"), expiry("user")
    redis = get_redis()
    redis.zrem(notice_keys.index("user", 0), other.pk)
    redis.zadd(notice_keys.index("user", 0), {"987654": 1})
    redis.zadd(notice_keys.expiry("user", 0), {str(kept.pk): 5})
    redis.set(notice_keys.bitmap("user", 0, 987654), b"\x80")  # read bits of the stale id
    [finding] = find()
    assert finding.key == notice_keys.index("user", 0)
    assert finding.detail == f"missing #{other.pk}; stale #987654; wrong expiry of #{kept.pk}"
    result = check_run(repair=True, areas=["announcements"])
    assert (result.drift_count, result.repaired_count, result.remaining_count) == (1, 1, 0)
    assert (index("user"), expiry("user")) == (want_index, want_expiry)
    assert not redis.exists(notice_keys.bitmap("user", 0, 987654))  # dropped with the stale id
    assert find() == []


def test_deleted_index_key_on_a_second_chunk(settings: Any) -> None:
    settings.MESSAGECENTER_NOTICE_CHUNK_USERS = 1000
    one = announce(["user"])
    readmodel.mark(platforms=["user"], user_id=1500, announcement_id=one.pk, read=True)  # builds chunk 1
    assert index("user", 1) == index("user", 0) != {}
    get_redis().delete(notice_keys.index("user", 1))
    [finding] = find()
    assert (finding.key, finding.detail) == (notice_keys.index("user", 1), f"missing #{one.pk}")
    check_run(repair=True, areas=["announcements"])
    assert index("user", 1) == index("user", 0)
    assert find() == []


def test_announcement_moved_off_a_platform_is_stale_there() -> None:
    moved = announce(["user", "customer"])
    customer_index = index("customer")
    assert customer_index == {moved.pk: readmodel.to_ms(T0)}
    moved.platform_rows.filter(platform="customer").delete()
    assert index("customer") == {}
    # As if the sync after that commit had been lost: the old index is back.
    get_redis().zadd(notice_keys.index("customer", 0), {str(pk): ms for pk, ms in customer_index.items()})
    [finding] = find()
    assert (finding.key, finding.detail) == (notice_keys.index("customer", 0), f"stale #{moved.pk}")
    check_run(repair=True, areas=["announcements"])
    assert index("customer") == {}
    assert find() == []


def test_expired_announcements_left_in_an_index_are_not_drift() -> None:
    expiring = announce(["user"], publish_at=timezone.now() - HOUR, expire_at=timezone.now() + timedelta(hours=1))
    Announcement.objects.filter(pk=expiring.pk).update(expire_at=timezone.now() - timedelta(seconds=1))
    # PostgreSQL says expired; Redis still lists it (with its old expiry) until the periodic sync.
    assert expiring.pk in index("user")
    assert find() == []
