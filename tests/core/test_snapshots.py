"""Durable read state, end to end: bitmap conversion, the progress helper, the
snapshot and rebuild commands over both apps (flush Redis, rebuild, compare)."""

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyroaring import BitMap

from core import keys
from core.bitmaps import bitmap_from_redis, bitmap_serialize, bitmap_split, bitmap_to_redis
from core.models import MarkJournal
from core.progress import Progress
from core.redis import keyspace_flush
from messagecenter import services as mc_services
from messagecenter.models import InboxReadSnapshot, InboxSeenSnapshot
from messagecenter.selectors import inbox_counts, inbox_list
from notices.models import AnnouncementReadSnapshot
from notices.selectors import announcement_list
from notices.services import announcement_mark_read
from tests.messagecenter.conftest import send
from tests.notices.conftest import T0, announce

OFFSETS = st.sets(st.integers(min_value=0, max_value=70_000), max_size=300)


# --- bitmap conversion ------------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(offsets=OFFSETS)
def test_a_redis_bitmap_becomes_the_same_set_of_offsets(redis: Any, offsets: set[int]) -> None:
    key = keys.mc_read_bitmap(1, 202611)
    redis.delete(key)
    pipe = redis.pipeline(transaction=False)
    for offset in offsets:
        pipe.setbit(key, offset, 1)
    pipe.execute()
    # Redis's own bit order (bit 0 = most significant bit of byte 0), decoded.
    assert set(bitmap_from_redis(redis.get(key))) == offsets


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(offsets=OFFSETS, base=st.sampled_from([0, 8, 1 << 20]))
def test_a_bitmap_written_back_reads_the_same_bits_in_redis(redis: Any, offsets: set[int], base: int) -> None:
    key = keys.mc_read_bitmap(1, 202611)
    redis.delete(key)
    absolute = {base + offset for offset in offsets}
    data = bitmap_to_redis(BitMap(absolute), base=base)
    if data:
        redis.set(key, data)
    assert redis.bitcount(key) == len(offsets)
    probe = sorted(offsets)[:20] + [o + 1 for o in sorted(offsets)[:20] if o + 1 not in offsets]
    pipe = redis.pipeline(transaction=False)
    for offset in probe:
        pipe.getbit(key, offset)
    assert pipe.execute() == [int(o in offsets) for o in probe]
    assert set(bitmap_from_redis(data, base=base)) == absolute


def test_zero_runs_and_edge_bits_decode_exactly() -> None:
    assert bitmap_from_redis(None) == BitMap()
    assert bitmap_from_redis(b"") == BitMap()
    assert bitmap_from_redis(b"\x00\x00\x00") == BitMap()
    assert list(bitmap_from_redis(b"\x80\x00\x01")) == [0, 23]
    assert list(bitmap_from_redis(b"\xff", base=16)) == list(range(16, 24))
    assert bitmap_to_redis([]) == b""
    assert bitmap_to_redis([0, 23]) == b"\x80\x00\x01"
    with pytest.raises(ValueError, match="below the base"):
        bitmap_to_redis([3], base=8)


def test_snapshots_are_compact_and_round_trip() -> None:
    everyone = bitmap_from_redis(b"\xff" * 8192)  # 65,536 readers in a row
    data = bitmap_serialize(everyone)
    assert len(data) < 64
    assert BitMap.deserialize(data) == BitMap(range(65_536))


def test_ids_split_into_chunks_keep_their_absolute_values() -> None:
    chunks = bitmap_split(BitMap([1, 7, 8, 30]), size=8)
    assert chunks == {0: BitMap([1, 7]), 1: BitMap([8]), 3: BitMap([30])}
    assert bitmap_split(BitMap(), size=8) == {}


# --- progress ---------------------------------------------------------------------------


class _Terminal(StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_a_bar_on_a_terminal_and_one_line_per_stage_otherwise() -> None:
    terminal = _Terminal()
    with Progress(terminal).stage("things", 4) as stage:
        stage.advance(2)
        stage.advance(2)
    drawn = terminal.getvalue()
    assert drawn.startswith("\r  things")
    assert "[" + "#" * 30 + "] 100% 4/4" in drawn
    assert drawn.endswith("s\n")

    plain = StringIO()
    with Progress(plain).stage("things", 4) as stage:
        stage.advance(3)
    assert "\r" not in plain.getvalue()
    assert plain.getvalue().startswith("  things: 3/4 done in ")
    assert plain.getvalue().count("\n") == 1

    silent = Progress(None)
    with silent.stage("things", 1) as stage:
        stage.advance()
    assert silent.tty is False


# --- both apps: snapshot, flush, rebuild ------------------------------------------------


def _visible_state(user: Any) -> dict[str, Any]:
    return {
        "announcements": {item.announcement.pk: item.read for item in announcement_list(user=user, limit=50).items},
        "inbox": {item.id: item.read for item in inbox_list(user=user, limit=50).results},
        "counts": inbox_counts(user=user),
    }


@pytest.mark.django_db
def test_flushed_redis_comes_back_as_of_the_last_snapshot_and_journal(
    operator: Any, recipient: Any, other_recipient: Any, settings: Any
) -> None:
    settings.MESSAGECENTER_PUSH_THRESHOLD = 1  # two recipients: a pull item
    a1 = announce(["user"], publish_at=T0.replace(year=2000))
    a2 = announce(["user"], publish_at=T0.replace(year=2001))
    push = send(operator, to={"users": [recipient]}, category="promotion")
    pull = send(operator, to={"users": [recipient, other_recipient]})
    later = send(operator, to={"users": [recipient]}, category="transaction")
    announcement_mark_read(user=recipient, announcement_id=a1.pk)
    mc_services.inbox_mark_read(user=recipient, item_id=push.ref)
    mc_services.inbox_mark_read(user=other_recipient, item_id=pull.ref)
    mc_services.inbox_mark_seen(user=recipient)
    snapshot_out = StringIO()
    call_command("snapshot_read_state", stdout=snapshot_out)
    assert "rows written: announcements 1, inboxes 3" in snapshot_out.getvalue()
    expected = {user.pk: _visible_state(user) for user in (recipient, other_recipient)}
    assert expected[recipient.pk]["announcements"] == {a1.pk: True, a2.pk: False}
    assert expected[recipient.pk]["counts"]["by_category"]["promotion"] == 0

    # Marks after the snapshot: the marks journal keeps them for the rebuild.
    announcement_mark_read(user=recipient, announcement_id=a2.pk)
    mc_services.inbox_mark_read(user=recipient, item_id=later.ref)
    assert _visible_state(recipient) != expected[recipient.pk]
    marked = {user.pk: _visible_state(user) for user in (recipient, other_recipient)}
    # The snapshot run forgot the marks it copied: only the two made since are left.
    assert list(MarkJournal.objects.values_list("user_id", "topic")) == [
        (recipient.pk, "notices.read"),
        (recipient.pk, "inbox.read"),
    ]

    keyspace_flush()
    call_command("rebuild_redis", "--quiet", stdout=StringIO())
    for user in (recipient, other_recipient):
        assert _visible_state(user) == marked[user.pk]

    # Without the journal, the snapshots alone: as of the last snapshot run.
    MarkJournal.objects.all().delete()
    keyspace_flush()
    out = StringIO()
    call_command("rebuild_redis", stdout=out)
    for user in (recipient, other_recipient):
        assert _visible_state(user) == expected[user.pk]
    text = out.getvalue()
    for stage in ("announcement read state: 1/1", "inbox read state: 2/2", "messages: 3/3", "announcement indexes"):
        assert stage in text, text
    assert "Redis read model rebuilt." in text

    # Idempotent: a second run changes nothing anyone can see.
    call_command("rebuild_redis", "--quiet", stdout=(quiet := StringIO()))
    assert quiet.getvalue() == ""
    for user in (recipient, other_recipient):
        assert _visible_state(user) == expected[user.pk]


@pytest.mark.django_db
def test_snapshot_command_with_nothing_dirty_writes_nothing(recipient: Any) -> None:
    out = StringIO()
    call_command("snapshot_read_state", stdout=out)
    assert "rows written: announcements 0, inboxes 0" in out.getvalue()
    assert AnnouncementReadSnapshot.objects.count() == 0
    assert InboxReadSnapshot.objects.count() == InboxSeenSnapshot.objects.count() == 0
