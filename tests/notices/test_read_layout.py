"""The layout of the announcements' read state in Redis: counter blocks as wide
and as long as their counters need (widened, never wrong, when a counter
outgrows its width), and a recorded layout (format, users per chunk) so read
state written under another chunk size is rebuilt from PostgreSQL, not misread."""

from collections.abc import Iterable
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyroaring import BitMap

from core.bitmaps import bitmap_to_redis
from core.local_cache import local_caches_clear
from core.redis import get_redis, keyspace_flush
from durability import healing, rebuild
from durability.keys import readmodel_generation
from notices import keys as notice_keys
from notices import readmodel
from notices.models import Announcement, AnnouncementPlatform, AnnouncementRead
from notices.selectors import announcement_counts
from notices.services import announcement_mark_read, announcement_mark_unread
from tests.factories import UserFactory
from tests.notices.conftest import T0, on_platforms

pytestmark = pytest.mark.django_db(transaction=True)


def _bulk_announce(count: int) -> list[int]:
    created = Announcement.objects.bulk_create(
        Announcement(title=f"A{i}", body_html="<p>x</p>", summary="x", publish_at=T0 - timedelta(minutes=i + 1))
        for i in range(count)
    )
    AnnouncementPlatform.objects.bulk_create(AnnouncementPlatform(announcement=a, platform="user") for a in created)
    readmodel.platform_sync(platform="user")
    return [a.pk for a in created]


def _counter(redis: Any, user_id: int) -> int:
    chunk, offset = readmodel.user_slot(user_id)
    block, index = readmodel._counter_of(offset)
    return readmodel.counter_from_block(redis.get(notice_keys.reads("user", chunk, block)), index)


def _width(redis: Any, user_id: int) -> int:
    chunk, offset = readmodel.user_slot(user_id)
    data = redis.get(notice_keys.reads("user", chunk, readmodel._counter_of(offset)[0]))
    return int(data[0])


# --- Counter blocks --------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(counts=st.lists(st.one_of(st.integers(0, 20), st.integers(0, 2**33)), max_size=40))
def test_a_packed_block_reads_back_every_counter(counts: list[int]) -> None:
    data = readmodel._pack_block(counts)
    expected = [min(c, 2**32 - 1) for c in counts]
    assert [readmodel.counter_from_block(data, i) for i in range(len(counts) + 3)] == [*expected, 0, 0, 0]
    if not any(counts):
        assert data == b""
    else:
        # The narrowest width that holds them, up to the last non-zero counter only.
        width = data[0]
        assert width in (4, 8, 16, 32)
        assert max(expected) < 2**width
        assert width == 4 or max(expected) >= 2 ** (width // 2)
        last = max(i for i, c in enumerate(counts) if c)
        assert len(data) == 1 + -(-(last + 1) * width // 8)


def _window_length(offsets: Iterable[int]) -> int:
    """Bytes of the read bitmap of readers at these offsets of a chunk: a one-byte
    head for a window starting at a multiple of 16 below 4,080, else five bytes."""
    low, high = min(offsets) // 8, max(offsets) // 8
    start = low - low % 16
    if start < 4080:
        return 1 + high - start + 1
    return 5 + high - low + 1


@settings(max_examples=200, deadline=None)
@given(offsets=st.sets(st.integers(0, 2**15 - 1), max_size=30), chunk=st.integers(0, 3))
def test_a_read_bitmap_is_the_window_its_readers_span(offsets: set[int], chunk: int) -> None:
    size = 2**15
    users = BitMap(chunk * size + o for o in offsets)
    data = readmodel.window_to_redis(users, base=chunk * size)
    assert readmodel.window_from_redis(data, base=chunk * size) == users
    assert [readmodel._window_bit(data, o) for o in range(0, size, 97)] == [o in offsets for o in range(0, size, 97)]
    if offsets:
        assert len(data) == _window_length(offsets)
    else:
        assert data == b""
    # Before format 3 a bitmap was the whole chunk from offset 0.
    plain = bitmap_to_redis(users, base=chunk * size)
    assert readmodel.window_from_redis(plain, base=chunk * size, format=2) == users


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    offsets=st.lists(
        st.one_of(st.integers(0, 2**15 - 1), st.integers(4080 * 8 - 40, 2**15 - 1)), min_size=1, max_size=12
    )
)
def test_marks_in_any_order_make_the_window_python_writes(offsets: list[int]) -> None:
    # mark.lua moves the window's start to each new lowest reader: the string
    # is the one window_to_redis makes of the same readers (restores, rebuilds).
    keyspace_flush()
    local_caches_clear()
    Announcement.objects.all().delete()
    [pk] = _bulk_announce(1)
    base = 2**15  # chunk 1
    for offset in offsets:
        readmodel.mark(platforms=["user"], user_id=base + offset, announcement_id=pk, read=True)
    users = BitMap(base + o for o in offsets)
    assert get_redis().get(notice_keys.bitmap("user", 1, pk)) == readmodel.window_to_redis(users, base=base)
    assert readmodel.readers(announcement_id=pk, platforms=["user"]) == users


def test_a_lone_reader_far_into_a_chunk_makes_a_small_bitmap(redis: Any) -> None:
    created = _bulk_announce(2)
    readmodel.read_count(platform="user", user_id=0, now=T0)
    high = 10**9  # offset 18,944 of its chunk of 32,768
    chunk, offset = readmodel.user_slot(high)
    assert offset > 8 * 1000
    assert readmodel.mark(platforms=["user"], user_id=high, announcement_id=created[0], read=True)
    key = notice_keys.bitmap("user", chunk, created[0])
    assert redis.strlen(key) == 2  # its window starts at its byte (a multiple of 16): head and one byte
    # A reader before the window moves its start; one after it extends it.
    readers = [high]
    for user_id in (high - 20, high + 9, high - 3):
        assert readmodel.mark(platforms=["user"], user_id=user_id, announcement_id=created[0], read=True)
        readers.append(user_id)
        length = _window_length([readmodel.user_slot(u)[1] for u in readers])
        assert redis.strlen(key) == length
    probe = [*readers, high - 21, high - 19, high + 1, high + 10, high + 100, high - 100]
    assert readmodel.read_bits(platform="user", announcement_id=created[0], user_ids=probe) == [
        u in readers for u in probe
    ]
    # Clearing outside the window changes nothing and writes nothing.
    assert not readmodel.mark(platforms=["user"], user_id=high - 1000, announcement_id=created[0], read=False)
    assert redis.strlen(key) == length
    assert readmodel.read_counts(announcement_id=created[0], platforms=["user"]) == {"user": 4}
    for user_id in readers:
        assert readmodel.read_count(platform="user", user_id=user_id, now=T0) == (2, 1)
    # An expiry moves every reader's counter (advance.lua reads the window).
    Announcement.objects.filter(pk=created[0]).update(expire_at=T0 + timedelta(minutes=1))
    readmodel.platform_sync(platform="user")
    for user_id in readers:
        assert readmodel.read_count(platform="user", user_id=user_id, now=T0 + timedelta(minutes=2)) == (1, 0)
    assert readmodel.readers(announcement_id=created[0], platforms=["user"]) == BitMap(readers)


def test_a_block_is_as_long_and_as_wide_as_its_counters_need(redis: Any) -> None:
    created = _bulk_announce(3)
    for user_id in (0, 1, 2047):
        for pk in created:
            readmodel.mark(platforms=["user"], user_id=user_id, announcement_id=pk, read=True)
    readmodel.read_count(platform="user", user_id=0, now=T0)  # the chunk time passes the publishes
    assert [_counter(redis, u) for u in (0, 1, 2, 2047)] == [3, 3, 0, 3]
    # A header byte and 2,048 4-bit counters: half a byte per user, not two.
    assert redis.strlen(notice_keys.reads("user", 0, 0)) == 1 + 1024
    readmodel.mark(platforms=["user"], user_id=2048 + 5, announcement_id=created[0], read=True)
    # The next block holds users up to the one that read: 4 bytes, not 1 KiB.
    assert redis.strlen(notice_keys.reads("user", 0, 1)) == 1 + 3


def test_a_counter_past_its_width_widens_the_block_and_keeps_every_counter(redis: Any) -> None:
    created = _bulk_announce(300)
    # Each count moves the chunk time over at most ADVANCE_BATCH publishes:
    # then the marks below move counters.
    for _ in range(300 // readmodel.ADVANCE_BATCH + 2):
        readmodel.read_count(platform="user", user_id=0, now=T0)
    for user_id, reads in ((1, 3), (6, 15)):
        for pk in created[:reads]:
            readmodel.mark(platforms=["user"], user_id=user_id, announcement_id=pk, read=True)
    assert (_width(redis, 1), _counter(redis, 1), _counter(redis, 6)) == (4, 3, 15)
    readmodel.mark(platforms=["user"], user_id=6, announcement_id=created[15], read=True)
    assert (_width(redis, 1), _counter(redis, 1), _counter(redis, 6)) == (8, 3, 16)
    for pk in created[16:255]:
        readmodel.mark(platforms=["user"], user_id=6, announcement_id=pk, read=True)
    assert (_width(redis, 6), _counter(redis, 6)) == (8, 255)
    readmodel.mark(platforms=["user"], user_id=6, announcement_id=created[255], read=True)
    assert (_width(redis, 1), _counter(redis, 1), _counter(redis, 6)) == (16, 3, 256)
    readmodel.mark(platforms=["user"], user_id=6, announcement_id=created[0], read=False)
    assert readmodel.read_count(platform="user", user_id=6, now=T0) == (300, 255)
    assert readmodel.read_count(platform="user", user_id=1, now=T0) == (300, 3)
    assert readmodel.read_count(platform="user", user_id=2, now=T0) == (300, 0)


def test_an_expiry_moving_many_readers_widens_nothing_it_need_not(redis: Any) -> None:
    # advance.lua moves every reader of an announcement at once: a decrement
    # never widens, and counters at 0 stay 0 (the block holds no stray values).
    created = _bulk_announce(20)
    readmodel.read_count(platform="user", user_id=0, now=T0)
    for user_id in range(8):
        for pk in created[: 10 + user_id]:
            readmodel.mark(platforms=["user"], user_id=user_id, announcement_id=pk, read=True)
    assert [_counter(redis, u) for u in range(8)] == [10 + u for u in range(8)]
    assert _width(redis, 0) == 8  # users 6 and 7 passed 15
    Announcement.objects.filter(pk__in=created[:12]).update(expire_at=T0 + timedelta(minutes=1))
    readmodel.platform_sync(platform="user")
    later = T0 + timedelta(minutes=2)
    assert [readmodel.read_count(platform="user", user_id=u, now=later)[1] for u in range(8)] == [
        max(0, 10 + u - 12) for u in range(8)
    ]


# Random reads and unreads of 4 users (one block) over 40 live announcements,
# with the read state now and then copied to PostgreSQL, Redis flushed and the
# chunk rebuilt (its blocks then packed by Python at the width they need):
# every count equals the model.
LAYOUT_ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("read"), st.integers(0, 3), st.integers(0, 39), st.integers(1, 30)),
        st.tuples(st.just("unread"), st.integers(0, 3), st.integers(0, 39), st.integers(1, 30)),
        st.tuples(st.just("rebuild")),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=LAYOUT_ACTIONS)
def test_counts_stay_exact_across_widths_and_rebuilds(actions: list[tuple[Any, ...]]) -> None:
    keyspace_flush()
    local_caches_clear()
    Announcement.objects.all().delete()
    users = [on_platforms(UserFactory(), "user") for _ in range(4)]
    created = sorted(_bulk_announce(40))
    read: set[tuple[int, int]] = set()
    for action in actions:
        if action[0] == "rebuild":
            keyspace_flush()
            local_caches_clear()
            call_command("notices_rebuild", "--quiet", stdout=StringIO())
            continue
        kind, who, start, span = action
        user = users[who]
        for pk in created[start : start + span]:
            if kind == "read":
                announcement_mark_read(user=user, announcement_id=pk, now=T0)
                read.add((user.pk, pk))
            else:
                announcement_mark_unread(user=user, announcement_id=pk, now=T0)
                read.discard((user.pk, pk))
        for other in users:
            mine = sum(1 for u, _ in read if u == other.pk)
            assert announcement_counts(user=other, now=T0) == {"read": mine, "unread": 40 - mine}, action
    for user in users:
        user.delete()


# --- The recorded layout -------------------------------------------------------------------


def test_a_new_redis_takes_this_processs_layout(redis: Any) -> None:
    assert redis.get(notice_keys.layout()) is None
    _bulk_announce(1)
    assert redis.get(notice_keys.layout()) == readmodel.layout().encode()
    assert readmodel.layout() == f"{readmodel.LAYOUT_FORMAT}:{2**15}"


def test_read_state_refilled_after_a_flush_keeps_its_layout(redis: Any) -> None:
    # This process has seen Redis hold its layout; then Redis loses everything
    # and this process refills it (a publish, a first read): the layout comes
    # back with the chunk set, so another process (no memory of the first
    # look) finds its own layout, not read state of an unknown one.
    user = UserFactory()
    on_platforms(user, "user")
    created = _bulk_announce(2)
    keyspace_flush()
    readmodel.ids_cache.clear()
    readmodel.platform_sync(platform="user")
    announcement_mark_read(user=user, announcement_id=created[0], now=T0)
    assert redis.get(notice_keys.layout()) == readmodel.layout().encode()
    local_caches_clear()  # another process
    assert announcement_counts(user=user, now=T0) == {"read": 1, "unread": 1}


def _marks(users: list[Any], created: list[int]) -> set[tuple[int, int]]:
    """User i reads the announcements whose position is a multiple of i + 1."""
    marked = set()
    for i, user in enumerate(users):
        for j, pk in enumerate(created):
            if j % (i + 1) == 0:
                announcement_mark_read(user=user, announcement_id=pk, now=T0)
                marked.add((user.pk, pk))
    return marked


def _assert_read_state(users: list[Any], created: list[int], marked: set[tuple[int, int]]) -> None:
    ids = [u.pk for u in users]
    for pk in created:
        bits = readmodel.read_bits(platform="user", announcement_id=pk, user_ids=ids)
        assert bits == [(u, pk) in marked for u in ids], pk
    for user in users:
        mine = sum(1 for u, _ in marked if u == user.pk)
        assert readmodel.read_count(platform="user", user_id=user.pk, now=T0) == (len(created), mine)
        assert announcement_counts(user=user, now=T0) == {"read": mine, "unread": len(created) - mine}


def test_a_changed_chunk_size_is_rebuilt_from_postgres_not_misread(redis: Any, settings: Any) -> None:
    settings.MESSAGECENTER_NOTICE_CHUNK_USERS = 2**20
    users = [on_platforms(UserFactory(), "user") for _ in range(10)]
    created = _bulk_announce(5)
    marked = _marks(users, created)
    hours = readmodel.read_hours(announcement_id=created[0], platforms=["user"])
    # Every mark committed its row before its answer.
    assert AnnouncementRead.objects.count() == len(marked)
    assert redis.get(notice_keys.layout()) == f"{readmodel.LAYOUT_FORMAT}:{2**20}".encode()

    # Smaller chunks: the users now sit in several of them, at other offsets.
    settings.MESSAGECENTER_NOTICE_CHUNK_USERS = 4
    assert len({readmodel.user_slot(u.pk)[0] for u in users}) >= 3
    local_caches_clear()
    with pytest.raises(readmodel.LayoutMismatch):
        readmodel.read_bits(platform="user", announcement_id=created[0], user_ids=[users[5].pk])
    with pytest.raises(readmodel.LayoutMismatch):
        readmodel.read_count(platform="user", user_id=users[5].pk, now=T0)
    assert redis.get(readmodel_generation()) is None  # every process now answers from PostgreSQL

    call_command("rebuild_redis", "--quiet", stdout=StringIO())
    assert redis.get(notice_keys.layout()) == readmodel.layout().encode() == b"%d:4" % readmodel.LAYOUT_FORMAT
    _assert_read_state(users, created, marked)
    # The read-rate chart keeps its history (summed into chunk 0's counts).
    assert readmodel.read_hours(announcement_id=created[0], platforms=["user"]) == hours
    # Nothing of the old layout is left: its chunk 0 bitmap held every user at
    # their id's offset; now each bitmap is a window of a chunk of 4 users.
    for user in users:
        chunk = readmodel.user_slot(user.pk)[0]
        assert redis.strlen(notice_keys.bitmap("user", chunk, created[0])) <= 1 + 1


def test_read_state_from_before_layouts_were_recorded_is_rebuilt(redis: Any) -> None:
    users = [on_platforms(UserFactory(), "user") for _ in range(3)]
    created = _bulk_announce(4)
    marked = _marks(users, created)
    redis.delete(notice_keys.layout())  # as the previous version left Redis
    local_caches_clear()
    with pytest.raises(readmodel.LayoutMismatch):
        readmodel.read_count(platform="user", user_id=users[0].pk, now=T0)
    call_command("rebuild_redis", "--quiet", stdout=StringIO())
    _assert_read_state(users, created, marked)


def test_a_mismatch_starts_the_healing_rebuild(redis: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    users = [on_platforms(UserFactory(), "user") for _ in range(3)]
    created = _bulk_announce(3)
    marked = _marks(users, created)
    call_command("rebuild_redis", "--quiet", stdout=StringIO())  # a generation to lose
    started: list[bool] = []
    # The healer thread would run rebuild.heal on a connection of its own,
    # which cannot see this test's uncommitted rows: it runs here instead.
    monkeypatch.setattr(healing, "heal_soon", lambda: started.append(True))
    healing.forget()
    try:
        # override_settings, not pytest-django's ``settings`` (which would put
        # back the settings of its first change: healing on, for later tests).
        with override_settings(MESSAGECENTER_SELF_HEALING=True):
            assert healing.check(fresh=True)
        with override_settings(MESSAGECENTER_SELF_HEALING=True, MESSAGECENTER_NOTICE_CHUNK_USERS=2):
            # Served from PostgreSQL meanwhile: the count still answers.
            mine = sum(1 for u, _ in marked if u == users[0].pk)
            assert announcement_counts(user=users[0], now=T0) == {"read": mine, "unread": len(created) - mine}
            assert started
            assert not healing.check(fresh=True)
            rebuild.heal()
            assert healing.check(fresh=True)
            assert redis.get(notice_keys.layout()) == b"%d:2" % readmodel.LAYOUT_FORMAT
            _assert_read_state(users, created, marked)
    finally:
        healing.forget()
