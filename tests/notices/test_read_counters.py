"""Per-user read counters (notices/lua/_counters.lua, count.lua, advance.lua):
counts and list pages equal a brute-force computation from PostgreSQL through
any sequence of publishes, schedules, expiries, edits, deletes and marks; a
count reads the user's counter, not the announcements; a reader with a high
user id makes no large key."""

from datetime import datetime, timedelta
from typing import Any
from unittest import mock

import pytest
from django.db.models import Q
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.api.errors import NotFound
from core.lua import LuaScript
from notices import keys as notice_keys
from notices import readmodel
from notices.models import Announcement, AnnouncementPlatform
from notices.selectors import announcement_counts, announcement_list
from notices.services import (
    announcement_delete,
    announcement_mark_read,
    announcement_mark_unread,
    announcement_update,
)
from tests.factories import UserFactory
from tests.notices.conftest import HOUR, T0, announce, on_platforms

pytestmark = pytest.mark.django_db(transaction=True)

# Users in three chunks of 8 ids (two counter blocks of 4 users each), the
# last one far out.
USER_IDS = (3, 6, 13, 8 * 1000 + 5)


def _live_ids(now: datetime) -> list[int]:
    """PostgreSQL's answer: the "user" platform's announcements live at ``now``, newest first."""
    rows = (
        Announcement.objects.filter(platform_rows__platform="user", publish_at__lte=now)
        .filter(Q(expire_at__isnull=True) | Q(expire_at__gt=now))
        .order_by("-publish_at", "-id")
    )
    return list(rows.values_list("pk", flat=True))


def _pages(user: Any, now: datetime) -> list[tuple[int, bool]]:
    seen: list[tuple[int, bool]] = []
    cursor = None
    for _ in range(50):
        page = announcement_list(user=user, limit=2, cursor=cursor, now=now)
        seen.extend((item.announcement.pk, item.read) for item in page.items)
        cursor = page.next_cursor
        if cursor is None:
            return seen
    raise AssertionError("pages never ended")


ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("announce"), st.integers(-2, 3), st.one_of(st.none(), st.integers(1, 5))),
        st.tuples(st.just("mark"), st.integers(0, 3), st.integers(0, 7), st.booleans()),
        st.tuples(st.just("unmark_all"), st.integers(0, 3)),
        st.tuples(st.just("edit"), st.integers(0, 7), st.integers(-2, 4), st.one_of(st.none(), st.integers(1, 4))),
        st.tuples(st.just("delete"), st.integers(0, 7)),
        st.tuples(st.just("tick"), st.integers(-1, 3)),
    ),
    min_size=4,
    max_size=18,
)


@override_settings(MESSAGECENTER_NOTICE_CHUNK_USERS=8)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=ACTIONS)
def test_counts_and_pages_equal_postgres_through_any_sequence(actions: list[tuple[Any, ...]]) -> None:
    with mock.patch.object(readmodel, "NOTICE_BLOCK_USERS", 4):
        users = [on_platforms(UserFactory(id=pk, username=f"c{pk}"), "user") for pk in USER_IDS]
        _run(users, actions)
        # Examples share Redis: deleting everything must leave every counter at zero.
        Announcement.objects.all().delete()
        for user in users:
            assert announcement_counts(user=user, now=T0) == {"read": 0, "unread": 0}, user.pk
    for user in users:
        user.delete()


def _run(users: list[Any], actions: list[tuple[Any, ...]]) -> None:
    now = T0
    made: list[Any] = []
    read: set[tuple[int, int]] = set()  # (user, announcement): the marks made, the model of the bits
    for action in actions:
        kind = action[0]
        if kind == "announce":
            publish = now + action[1] * HOUR
            expire = None if action[2] is None else publish + action[2] * HOUR
            made.append(announce(["user"], publish_at=publish, expire_at=expire))
        elif made and kind == "mark":
            user, target = users[action[1]], made[action[2] % len(made)]
            try:
                if action[3]:
                    announcement_mark_read(user=user, announcement_id=target.pk, now=now)
                    read.add((user.pk, target.pk))
                else:
                    announcement_mark_unread(user=user, announcement_id=target.pk, now=now)
                    read.discard((user.pk, target.pk))
            except NotFound:
                pass  # not live (scheduled, expired or deleted): nothing changed
        elif kind == "unmark_all":
            user = users[action[1]]
            for pk in _live_ids(now):
                announcement_mark_unread(user=user, announcement_id=pk, now=now)
                read.discard((user.pk, pk))
        elif made and kind == "edit":
            target = made[action[1] % len(made)]
            if Announcement.objects.filter(pk=target.pk).exists():
                publish = now + action[2] * HOUR
                expire = None if action[3] is None else publish + action[3] * HOUR
                announcement_update(announcement=target, publish_at=publish, expire_at=expire)
        elif made and kind == "delete":
            target = made.pop(action[1] % len(made))
            if Announcement.objects.filter(pk=target.pk).exists():
                announcement_delete(announcement=target)
                read = {(u, a) for u, a in read if a != target.pk}
        elif kind == "tick":
            now = now + action[1] * HOUR  # time also goes back: counts answer for any moment
        live = _live_ids(now)
        for user in users:
            expected = [(pk, (user.pk, pk) in read) for pk in live]
            read_count = sum(1 for _, flag in expected if flag)
            assert announcement_counts(user=user, now=now) == {
                "read": read_count,
                "unread": len(live) - read_count,
            }, (action, user.pk)
            assert _pages(user, now) == expected, (action, user.pk)


def _bulk_announce(count: int, *, at: datetime) -> list[Announcement]:
    created = Announcement.objects.bulk_create(
        Announcement(title=f"A{i}", body_html="<p>x</p>", summary="x", publish_at=at - timedelta(minutes=i))
        for i in range(count)
    )
    AnnouncementPlatform.objects.bulk_create(AnnouncementPlatform(announcement=a, platform="user") for a in created)
    readmodel.platform_sync(platform="user")
    return created


def test_a_count_reads_the_users_counter_not_the_announcements(recipient: Any, redis: Any) -> None:
    """2,000 live announcements, 700 read: the count is one script call with
    the user's counter among four keys, and it answers what the counter holds."""
    on_platforms(recipient, "user")
    created = _bulk_announce(2000, at=T0)
    # Each count moves the chunk time over at most ADVANCE_BATCH publish times
    # (each answer is exact meanwhile); a few counts bring it to T0.
    for _ in range(2000 // readmodel.ADVANCE_BATCH + 2):
        assert announcement_counts(user=recipient, now=T0) == {"read": 0, "unread": 2000}
    chunk, offset = readmodel.user_slot(recipient.pk)
    assert redis.hget(notice_keys.meta("user", chunk), "t") == str(readmodel.to_ms(T0)).encode()
    for a in created[::2][:700]:
        readmodel.mark(platforms=["user"], user_id=recipient.pk, announcement_id=a.pk, read=True)
    block, index = readmodel._counter_of(offset)
    counter = notice_keys.reads("user", chunk, block)
    assert readmodel.counter_from_block(redis.get(counter), index) == 700
    assert redis.get(counter)[0] == 16  # 700 needs 16-bit counters: the block widened twice

    calls: list[list[str]] = []
    original = LuaScript.__call__

    def recording(self: LuaScript, keys: Any, args: Any = (), client: Any = None) -> Any:
        calls.append(list(keys))
        return original(self, keys, args, client)

    with mock.patch.object(LuaScript, "__call__", recording):
        assert announcement_counts(user=recipient, now=T0) == {"read": 700, "unread": 1300}
    assert calls == [[*readmodel._chunk_keys("user", chunk), counter]]
    # The answer is the counter's: a forged counter shows (a scan would not see it).
    redis.set(counter, readmodel._pack_block([0] * index + [5]))
    assert announcement_counts(user=recipient, now=T0) == {"read": 5, "unread": 1995}


def test_expiry_moves_every_readers_counter_once(recipient: Any, other_recipient: Any, redis: Any) -> None:
    for user in (recipient, other_recipient):
        on_platforms(user, "user")
    short = announce(["user"], publish_at=T0, expire_at=T0 + HOUR)
    long = announce(["user"], publish_at=T0)
    for user in (recipient, other_recipient):
        announcement_mark_read(user=user, announcement_id=short.pk, now=T0)
        announcement_mark_read(user=user, announcement_id=long.pk, now=T0)
        assert announcement_counts(user=user, now=T0) == {"read": 2, "unread": 0}
    later = T0 + 2 * HOUR
    assert announcement_counts(user=recipient, now=later) == {"read": 1, "unread": 0}
    # That count moved the chunk time past the expiry, for both readers (one chunk holds them).
    chunk, offset = readmodel.user_slot(other_recipient.pk)
    assert readmodel.user_slot(recipient.pk)[0] == chunk
    assert redis.hget(notice_keys.meta("user", chunk), "t") == str(readmodel.to_ms(later)).encode()
    block, index = readmodel._counter_of(offset)
    assert readmodel.counter_from_block(redis.get(notice_keys.reads("user", chunk, block)), index) == 1
    assert announcement_counts(user=other_recipient, now=later) == {"read": 1, "unread": 0}
    # Back in time: the expired one counts again, without moving the chunk time back.
    assert announcement_counts(user=other_recipient, now=T0) == {"read": 2, "unread": 0}


@override_settings(MESSAGECENTER_NOTICE_CHUNK_USERS=2**15)
def test_a_reader_with_a_high_user_id_makes_no_large_key(redis: Any) -> None:
    # The read model's own calls (a user row with id 10^9 would move SQLite's
    # next ids up there for the rest of an embedded run).
    user_id = 10**9
    a = announce(["user"])
    assert readmodel.mark(platforms=["user"], user_id=user_id, announcement_id=a.pk, read=True)
    assert readmodel.read_count(platform="user", user_id=user_id, now=T0) == (1, 1)
    assert readmodel.read_page(platform="user", user_id=user_id, now=T0, after=None, limit=5) == [
        (readmodel.to_ms(T0), a.pk, True)
    ]
    sizes = {key: redis.strlen(key) for key in redis.scan_iter(count=1000) if redis.type(key) == b"string"}
    chunk = readmodel.user_slot(user_id)[0]
    assert notice_keys.bitmap("user", chunk, a.pk).encode() in sizes
    # A bitmap holds one chunk (32,768 users: 4 KiB); a counter block is as long as
    # its counters need (a header byte, then 4 bits per user up to this one).
    assert max(sizes.values()) <= 4096, sizes
    block = readmodel._counter_of(readmodel.user_slot(user_id)[1])[0]
    assert redis.strlen(notice_keys.reads("user", chunk, block)) <= 1025
