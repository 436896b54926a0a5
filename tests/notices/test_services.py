"""Write use cases: PostgreSQL first, then the read model (after commit)."""

from typing import Any
from unittest import mock

import pytest
from django.conf import settings
from django.db import transaction
from django.test import override_settings

from core.api.errors import LimitExceeded, NotFound, ValidationFailed
from notices import keys as notice_keys
from notices import readmodel
from notices.models import Announcement, AnnouncementPlatform
from notices.selectors import announcement_counts
from notices.services import (
    announcement_delete,
    announcement_mark_read,
    announcement_mark_unread,
    announcement_publish_now,
    announcement_unpublish,
    announcement_update,
)
from tests.factories import UserFactory
from tests.notices.conftest import HOUR, T0, announce, on_platforms, read_bit

pytestmark = pytest.mark.django_db(transaction=True)

XSS_PAYLOADS = [
    "<script>alert(1)</script>",
    '<img src=x onerror="alert(1)">',
    '<a href="javascript:alert(1)">x</a>',
    '<svg onload="alert(1)"></svg>',
    '<iframe src="https://evil.example"></iframe>',
    '<p style="background:url(javascript:alert(1))" onclick="x()">x</p>',
    '<a href="JaVaScRiPt:alert(1)">x</a>',
    "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
]


def index_of(redis: Any, platform: str, chunk: int = 0) -> dict[int, float]:
    return {int(m): s for m, s in redis.zrange(notice_keys.index(platform, chunk), 0, -1, withscores=True)}


def test_create_writes_rows_then_indexes_each_platform(redis: Any) -> None:
    a = announce(["user", "customer"], expire_at=T0 + HOUR, pinned=True)
    a.refresh_from_db()
    assert a.platforms == ["user", "customer"]
    assert sorted(AnnouncementPlatform.objects.values_list("platform", flat=True)) == ["customer", "user"]
    assert a.summary == "Body text"
    for platform in ("user", "customer"):
        assert index_of(redis, platform) == {a.pk: readmodel.to_ms(T0)}
        assert redis.zscore(notice_keys.expiry(platform, 0), a.pk) == readmodel.to_ms(T0 + HOUR)
    assert index_of(redis, "operator") == {}
    # Publishing wrote no per-user state at all.
    assert redis.exists(notice_keys.bitmap("user", 0, a.pk)) == 0


def test_the_seed_key_shape_is_kept_for_chunk_zero() -> None:
    prefix = settings.MESSAGECENTER_KEY_PREFIX  # "test:", plus the run's slot on a cluster
    assert notice_keys.bitmap("user", 0, 12) == f"{prefix}notice:{{user}}:12"
    assert notice_keys.bitmap("user", 1, 12) == f"{prefix}notice:{{user:1}}:12"


def _create_then_fail() -> None:
    with transaction.atomic():
        announce(["user"])
        raise RuntimeError("boom")


def test_rolled_back_create_never_reaches_redis(redis: Any) -> None:
    with pytest.raises(RuntimeError):
        _create_then_fail()
    assert Announcement.objects.count() == 0
    assert index_of(redis, "user") == {}


@pytest.mark.parametrize("payload", XSS_PAYLOADS)
def test_body_is_sanitised_before_it_is_stored(payload: str) -> None:
    a = announce(body_html=f"<p>ok</p>{payload}")
    stored = Announcement.objects.get(pk=a.pk).body_html.lower()
    for bad in ("<script", "onerror", "onload", "onclick", "javascript:", "<iframe", "<svg", "style="):
        assert bad not in stored
    assert "<p>ok</p>" in stored


def test_links_are_kept_safe() -> None:
    a = announce(body_html='<p><a href="https://example.com">site</a></p>')
    assert 'rel="noopener noreferrer nofollow"' in a.body_html


def test_written_summary_is_kept_and_derived_one_follows_the_body() -> None:
    a = announce(body_html="<p>First body</p>")
    a = announcement_update(announcement=a, body_html="<p>Second body</p>")
    assert a.summary == "Second body"
    a = announcement_update(announcement=a, summary="Hand written")
    a = announcement_update(announcement=a, body_html="<p>Third body</p>")
    assert Announcement.objects.get(pk=a.pk).summary == "Hand written"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"platforms": []}, "platforms"),
        ({"platforms": ["martian"]}, "platforms"),
        ({"platforms": "user"}, "platforms"),
        ({"platforms": [1]}, "platforms"),
        ({"platforms": [{"x": 1}]}, "platforms"),
        ({"publish_at": "tomorrow"}, "publish_at"),
        ({"expire_at": T0 - HOUR}, "expire_at"),
        ({"expire_at": T0}, "expire_at"),
        ({"title": "  "}, "title"),
        ({"body_html": ""}, "body_html"),
        ({"title": "x" * 201}, "title"),
    ],
)
def test_invalid_create_changes_nothing(kwargs: dict[str, Any], field: str, redis: Any) -> None:
    from notices.services import announcement_create

    base: dict[str, Any] = {"author": None, "title": "t", "body_html": "<p>b</p>", "platforms": ["user"]}
    with pytest.raises(ValidationFailed) as info:
        announcement_create(**{**base, "publish_at": T0, **kwargs})
    assert field in (info.value.fields or {})
    assert Announcement.objects.count() == 0
    assert index_of(redis, "user") == {}


def test_invalid_update_changes_nothing() -> None:
    a = announce(["user"], expire_at=T0 + HOUR)
    with pytest.raises(ValidationFailed):
        announcement_update(announcement=a, title="new", publish_at=T0 + 2 * HOUR)
    with pytest.raises(ValidationFailed):
        announcement_update(announcement=a, platforms=["user", "nope"])
    with pytest.raises(ValidationFailed):
        announcement_update(announcement=a, author=None)
    fresh = Announcement.objects.get(pk=a.pk)
    assert (fresh.title, fresh.publish_at, fresh.platforms) == ("Hello", T0, ["user"])


def test_update_reindexes_only_when_times_or_platforms_change(redis: Any) -> None:
    a = announce(["user"])
    with mock.patch.object(readmodel, "platform_sync", wraps=readmodel.platform_sync) as sync:
        announcement_update(announcement=a, title="Renamed", pinned=True, body_html="<p>new</p>")
        assert sync.call_count == 0  # nothing Redis holds changed
        announcement_update(announcement=a, publish_at=T0 + HOUR)
        assert sync.call_count == 1
    assert index_of(redis, "user") == {a.pk: readmodel.to_ms(T0 + HOUR)}


def test_removing_a_platform_drops_its_index_entry_and_bitmaps_at_once(recipient: Any, redis: Any) -> None:
    on_platforms(recipient, "user", "customer")
    a = announce(["user", "customer"])
    announcement_mark_read(user=recipient, announcement_id=a.pk, now=T0)
    assert read_bit("customer", a.pk, recipient.pk) is True
    announcement_update(announcement=a, platforms=["user"])
    assert index_of(redis, "customer") == {}
    assert redis.exists(notice_keys.bitmap("customer", 0, a.pk)) == 0
    assert read_bit("user", a.pk, recipient.pk) is True


def test_delete_removes_keys_at_once_and_from_every_count(recipient: Any, redis: Any) -> None:
    on_platforms(recipient, "user", "customer")
    a = announce(["user", "customer"])
    b = announce(["user"])
    announcement_mark_read(user=recipient, announcement_id=a.pk, now=T0)
    assert announcement_counts(user=recipient, now=T0) == {"read": 1, "unread": 1}
    a_pk = a.pk
    announcement_delete(announcement=a)
    assert not Announcement.objects.filter(pk=a_pk).exists()
    for platform in ("user", "customer"):
        assert a_pk not in index_of(redis, platform)
        assert redis.exists(notice_keys.bitmap(platform, 0, a_pk)) == 0
    assert announcement_counts(user=recipient, now=T0) == {"read": 0, "unread": 1}
    assert index_of(redis, "user") == {b.pk: readmodel.to_ms(T0)}


def test_mark_read_and_unread_set_and_clear_the_bit(recipient: Any, redis: Any) -> None:
    a = announce(["user"])
    assert announcement_mark_read(user=recipient, announcement_id=a.pk, now=T0) is True
    assert announcement_mark_read(user=recipient, announcement_id=a.pk, now=T0) is False  # already read
    assert read_bit("user", a.pk, recipient.pk) is True
    assert announcement_mark_unread(user=recipient, announcement_id=a.pk, now=T0) is True
    assert announcement_mark_unread(user=recipient, announcement_id=a.pk, now=T0) is False
    assert read_bit("user", a.pk, recipient.pk) is False


def test_multi_platform_user_marks_every_targeted_platform(recipient: Any, redis: Any) -> None:
    on_platforms(recipient, "user", "customer")
    a = announce(["user", "customer", "operator"])
    announcement_mark_read(user=recipient, announcement_id=a.pk, now=T0)
    assert read_bit("user", a.pk, recipient.pk) is True
    assert read_bit("customer", a.pk, recipient.pk) is True
    # Not the user's platform: untouched.
    assert redis.exists(notice_keys.bitmap("operator", 0, a.pk)) == 0
    assert announcement_counts(user=recipient, now=T0) == {"read": 1, "unread": 0}
    announcement_mark_unread(user=recipient, announcement_id=a.pk, now=T0)
    assert read_bit("user", a.pk, recipient.pk) is False
    assert read_bit("customer", a.pk, recipient.pk) is False


def test_marking_needs_a_live_announcement_on_the_users_platforms(recipient: Any, redis: Any) -> None:
    elsewhere = announce(["customer"])
    scheduled = announce(["user"], publish_at=T0 + HOUR)
    expired = announce(["user"], expire_at=T0 + HOUR)
    for pk, now in ((elsewhere.pk, T0), (scheduled.pk, T0), (expired.pk, T0 + HOUR), (10**30, T0), (0, T0)):
        with pytest.raises(NotFound):
            announcement_mark_read(user=recipient, announcement_id=pk, now=now)
    assert redis.exists(notice_keys.bitmap("customer", 0, elsewhere.pk)) == 0


@override_settings(MESSAGECENTER_MAX_USER_ID=1000)
def test_user_ids_out_of_range_fail_before_redis() -> None:
    a = announce(["user"])
    big = UserFactory(id=1001)
    negative = mock.Mock(pk=-1, is_authenticated=True)
    with mock.patch("notices.readmodel.get_redis") as get_redis:
        for user in (big, negative):
            with pytest.raises(LimitExceeded):
                announcement_mark_read(user=user, announcement_id=a.pk, now=T0)
            with pytest.raises(LimitExceeded):
                announcement_counts(user=user, now=T0)
        assert get_redis.call_count == 0


def test_max_user_id_default_is_the_redis_bitmap_limit() -> None:
    with pytest.raises(LimitExceeded):
        readmodel.user_slot(2**32)
    assert readmodel.user_slot(2**32 - 1) == divmod(2**32 - 1, settings.MESSAGECENTER_NOTICE_CHUNK_USERS)


def test_publish_now_and_unpublish(recipient: Any) -> None:
    from django.utils import timezone

    a = announce(["user"], publish_at=timezone.now() + 24 * HOUR)
    assert announcement_counts(user=recipient) == {"read": 0, "unread": 0}
    announcement_publish_now(announcement=a)
    assert announcement_counts(user=recipient) == {"read": 0, "unread": 1}
    announcement_unpublish(announcement=a)
    assert announcement_counts(user=recipient) == {"read": 0, "unread": 0}
    assert Announcement.objects.filter(pk=a.pk).exists()
