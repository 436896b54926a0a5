"""The cached announcement count (notices/lua/count.lua): served from one small
key while its tag and validity hold, and equal, whatever happens, to the
count the live bitmaps give."""

from datetime import datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core import keys
from core.exceptions import NotFound
from notices import readmodel
from notices.selectors import _visible_from_redis, announcement_counts
from notices.services import (
    announcement_delete,
    announcement_mark_read,
    announcement_mark_unread,
    announcement_update,
)
from notices.snapshots import announcement_read_restore, announcement_read_snapshot
from tests.notices.conftest import HOUR, T0, announce, on_platforms

pytestmark = pytest.mark.django_db


def _from_bitmaps(user: Any, now: datetime) -> dict[str, int]:
    visible = _visible_from_redis(user=user, now=now)
    read = sum(1 for _, is_read in visible.values() if is_read)
    return {"read": read, "unread": len(visible) - read}


def test_the_count_is_cached_and_dropped_by_the_users_marks(recipient: Any, redis: Any) -> None:
    on_platforms(recipient, "user")
    first, second = announce(["user"]), announce(["user"])
    now = T0 + HOUR
    assert announcement_counts(user=recipient, now=now) == {"read": 0, "unread": 2}
    cached = keys.notice_user_count("user", 0, recipient.pk)
    assert redis.get(cached).endswith(b"|0")
    # Served from the key: a forged value shows (then the test puts it back).
    tag, _ = redis.get(cached).decode().split("|")
    redis.set(cached, f"{tag}|1")
    assert announcement_counts(user=recipient, now=now) == {"read": 1, "unread": 1}
    redis.delete(cached)
    announcement_mark_read(user=recipient, announcement_id=first.pk, now=now)
    assert not redis.exists(cached)
    assert announcement_counts(user=recipient, now=now) == {"read": 1, "unread": 1}
    announcement_mark_read(user=recipient, announcement_id=first.pk, now=now)  # no change: the cache stays
    assert redis.exists(cached)
    announcement_mark_unread(user=recipient, announcement_id=first.pk, now=now)
    assert announcement_counts(user=recipient, now=now) == {"read": 0, "unread": 2}
    assert 0 < redis.ttl(cached) <= readmodel.COUNT_CACHE_SECONDS
    assert second.pk


def test_restored_bitmaps_make_cached_counts_stale(recipient: Any, redis: Any) -> None:
    on_platforms(recipient, "user")
    a = announce(["user"])
    now = T0 + HOUR
    announcement_mark_read(user=recipient, announcement_id=a.pk, now=now)
    announcement_read_snapshot()
    redis.delete(keys.notice_bitmap("user", 0, a.pk))  # the bitmap is lost, the index is not
    assert announcement_counts(user=recipient, now=now) == {"read": 0, "unread": 1}
    announcement_read_restore()
    assert announcement_counts(user=recipient, now=now) == {"read": 1, "unread": 0}


ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("announce"), st.integers(-2, 3), st.one_of(st.none(), st.integers(1, 6))),
        st.tuples(st.just("mark"), st.integers(0, 7), st.booleans()),
        st.tuples(st.just("edit"), st.integers(0, 7), st.integers(-2, 4)),
        st.tuples(st.just("delete"), st.integers(0, 7)),
        st.tuples(st.just("tick"), st.integers(1, 3)),
    ),
    max_size=14,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=ACTIONS)
def test_the_cached_count_always_equals_the_bitmaps(recipient: Any, actions: list[tuple[Any, ...]]) -> None:
    """Publishes (some scheduled, some expiring), marks, edits of the times,
    deletes and time passing, in any order: after each step the cached count
    is what the live bitmaps say."""
    on_platforms(recipient, "user")
    now = T0
    made: list[Any] = []
    for action in actions:
        kind = action[0]
        if kind == "announce":
            publish = now + action[1] * HOUR
            expire = None if action[2] is None else publish + action[2] * HOUR
            made.append(announce(["user"], publish_at=publish, expire_at=expire))
        elif made and kind == "mark":
            target = made[action[1] % len(made)]
            try:
                if action[2]:
                    announcement_mark_read(user=recipient, announcement_id=target.pk, now=now)
                else:
                    announcement_mark_unread(user=recipient, announcement_id=target.pk, now=now)
            except NotFound:
                pass  # not live (scheduled, expired or deleted)
        elif made and kind == "edit":
            target = made[action[1] % len(made)]
            if target.pk is not None and type(target).objects.filter(pk=target.pk).exists():
                announcement_update(announcement=target, publish_at=now + action[2] * HOUR, expire_at=None)
        elif made and kind == "delete":
            target = made.pop(action[1] % len(made))
            if type(target).objects.filter(pk=target.pk).exists():
                announcement_delete(announcement=target)
        elif kind == "tick":
            now = now + action[1] * HOUR
        assert announcement_counts(user=recipient, now=now) == _from_bitmaps(recipient, now), action
