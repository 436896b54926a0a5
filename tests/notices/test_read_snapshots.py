"""Durable announcement read state: dirty tracking, the snapshot job, restore on rebuild."""

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import DatabaseError
from pyroaring import BitMap

from core import keys
from core.redis import keyspace_flush
from notices import readmodel
from notices.models import AnnouncementReadSnapshot
from notices.selectors import announcement_counts, announcement_list
from notices.services import announcement_mark_read, announcement_mark_unread, announcement_update
from notices.snapshots import announcement_read_restore, announcement_read_snapshot
from notices.tasks import read_snapshot_task
from tests.factories import UserFactory
from tests.notices.conftest import HOUR, T0, announce, on_platforms

pytestmark = pytest.mark.django_db


def readers(announcement: Any, platform: str = "user") -> set[int]:
    row = AnnouncementReadSnapshot.objects.get(announcement=announcement, platform=platform)
    return set(BitMap.deserialize(bytes(row.readers)))


def read_flags(user: Any) -> dict[int, bool]:
    return {item.announcement.pk: item.read for item in announcement_list(user=user, limit=50, now=T0 + HOUR).items}


def dirty(redis: Any) -> set[str]:
    return {m.decode() for m in redis.smembers(keys.notice_snapshot_dirty())}


def test_marks_note_what_changed_and_the_job_copies_only_that(recipient: Any, outsider: Any, redis: Any) -> None:
    a, b = announce(["user"]), announce(["user", "customer"])
    announcement_mark_read(user=recipient, announcement_id=a.pk, now=T0)
    announcement_mark_read(user=outsider, announcement_id=a.pk, now=T0)
    assert dirty(redis) == {f"user:{a.pk}"}
    # Marking what is already read changes no bit: nothing to copy.
    redis.delete(keys.notice_snapshot_dirty())
    assert announcement_mark_read(user=recipient, announcement_id=a.pk, now=T0) is False
    assert dirty(redis) == set()

    announcement_mark_read(user=recipient, announcement_id=b.pk, now=T0)
    assert announcement_read_snapshot() == 1
    assert list(AnnouncementReadSnapshot.objects.values_list("announcement_id", "platform")) == [(b.pk, "user")]
    assert readers(b) == {recipient.pk}
    assert dirty(redis) == set()
    assert announcement_read_snapshot() == 0  # nothing dirty: nothing written

    announcement_mark_unread(user=recipient, announcement_id=b.pk, now=T0)
    assert read_snapshot_task() == 1
    assert readers(b) == set()


def test_flush_then_rebuild_restores_reads_as_of_the_snapshot(recipient: Any, other_recipient: Any, redis: Any) -> None:
    a, b, c = announce(["user"]), announce(["user"]), announce(["user"])
    for announcement in (a, b):
        announcement_mark_read(user=recipient, announcement_id=announcement.pk, now=T0)
    announcement_mark_read(user=other_recipient, announcement_id=a.pk, now=T0)
    announcement_read_snapshot()
    before = {u.pk: read_flags(u) for u in (recipient, other_recipient)}
    counts = {u.pk: announcement_counts(user=u, now=T0 + HOUR) for u in (recipient, other_recipient)}
    announcement_mark_read(user=recipient, announcement_id=c.pk, now=T0)  # after the snapshot: lost

    keyspace_flush()
    readmodel.clear_local_cache()
    call_command("notices_rebuild", stdout=StringIO())
    assert {u.pk: read_flags(u) for u in (recipient, other_recipient)} == before
    assert before[recipient.pk] == {a.pk: True, b.pk: True, c.pk: False}
    assert {u.pk: announcement_counts(user=u, now=T0 + HOUR) for u in (recipient, other_recipient)} == counts
    assert readmodel.read_counts(announcement_id=a.pk, platforms=["user"]) == {"user": 2}

    call_command("notices_rebuild", stdout=StringIO())  # idempotent
    assert {u.pk: read_flags(u) for u in (recipient, other_recipient)} == before


def test_a_rebuild_while_serving_keeps_marks_newer_than_the_snapshot(recipient: Any) -> None:
    a, b = announce(["user"]), announce(["user"])
    announcement_mark_read(user=recipient, announcement_id=a.pk, now=T0)
    announcement_read_snapshot()
    announcement_mark_unread(user=recipient, announcement_id=a.pk, now=T0)
    announcement_mark_read(user=recipient, announcement_id=b.pk, now=T0)
    assert announcement_read_restore() == 0  # every bitmap is there: nothing overwritten
    call_command("notices_rebuild", "--quiet", stdout=StringIO())
    assert read_flags(recipient) == {a.pk: False, b.pk: True}


def test_bitmaps_of_every_chunk_come_back(redis: Any, settings: Any) -> None:
    settings.MESSAGECENTER_NOTICE_CHUNK_USERS = 4
    users: list[Any] = [UserFactory() for _ in range(9)]  # ids spread over at least three chunks
    a = announce(["user"])
    for user in users[::2]:
        announcement_mark_read(user=user, announcement_id=a.pk, now=T0)
    chunks = {readmodel.user_slot(u.pk)[0] for u in users}
    assert len(chunks) >= 3
    assert announcement_read_snapshot() == 1
    assert readers(a) == {u.pk for u in users[::2]}

    keyspace_flush()
    readmodel.clear_local_cache()
    call_command("notices_rebuild", stdout=StringIO())
    expected = [i % 2 == 0 for i in range(len(users))]
    assert readmodel.read_bits(platform="user", announcement_id=a.pk, user_ids=[u.pk for u in users]) == expected
    assert readmodel.read_counts(announcement_id=a.pk, platforms=["user"]) == {"user": len(users[::2])}


def test_a_fresh_redis_restores_a_chunk_before_its_first_mark(recipient: Any, other_recipient: Any, redis: Any) -> None:
    # No rebuild at all: the first index build after the loss puts the chunk's
    # snapshots back before any mark can land, so one user's mark cannot hide
    # every other reader of the same bitmap.
    a, b = announce(["user"]), announce(["user"])
    announcement_mark_read(user=other_recipient, announcement_id=a.pk, now=T0)
    announcement_mark_read(user=recipient, announcement_id=b.pk, now=T0)
    announcement_read_snapshot()
    keyspace_flush()
    readmodel.clear_local_cache()
    announcement_mark_read(user=recipient, announcement_id=a.pk, now=T0)
    assert read_flags(other_recipient) == {a.pk: True, b.pk: False}
    assert read_flags(recipient) == {a.pk: True, b.pk: True}
    # The job finds no restored marker, restores (nothing left to add), then copies.
    assert announcement_read_snapshot() == 1
    assert readers(a) == {recipient.pk, other_recipient.pk}


def test_the_job_never_copies_a_redis_that_lost_its_data_over_good_snapshots(
    recipient: Any, other_recipient: Any, redis: Any
) -> None:
    a = announce(["user"])
    announcement_mark_read(user=other_recipient, announcement_id=a.pk, now=T0)
    announcement_read_snapshot()
    # Lost between the reads and the marker check: the batch goes back, untouched.
    announcement_mark_read(user=recipient, announcement_id=a.pk, now=T0)
    redis.delete(keys.notice_snapshot_restored())
    members = readmodel.snapshot_dirty_pop(count=10)
    _, intact = readmodel.snapshot_readers(members=members)
    assert intact is False
    readmodel.snapshot_dirty_return(members=members)
    assert announcement_read_snapshot() == 1  # restores first (SET NX), then copies
    assert readers(a) == {recipient.pk, other_recipient.pk}


def test_a_database_failure_puts_the_batch_back(recipient: Any, redis: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    a = announce(["user"])
    announcement_mark_read(user=recipient, announcement_id=a.pk, now=T0)
    announcement_read_snapshot()  # sets the restored marker
    announcement_mark_unread(user=recipient, announcement_id=a.pk, now=T0)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise DatabaseError("database is down")

    monkeypatch.setattr(AnnouncementReadSnapshot.objects, "bulk_create", broken)
    with pytest.raises(DatabaseError):
        announcement_read_snapshot()
    assert dirty(redis) == {f"user:{a.pk}"}
    assert readers(a) == {recipient.pk}
    monkeypatch.undo()
    assert announcement_read_snapshot() == 1
    assert readers(a) == set()


def test_a_platform_the_announcement_left_loses_its_snapshot(recipient: Any, redis: Any) -> None:
    on_platforms(recipient, "user", "customer")
    a = announce(["user", "customer"])
    announcement_mark_read(user=recipient, announcement_id=a.pk, now=T0)
    assert announcement_read_snapshot() == 2
    announcement_mark_unread(user=recipient, announcement_id=a.pk, now=T0)
    announcement_update(announcement=a, platforms=["user"])
    assert announcement_read_snapshot() == 1
    assert list(AnnouncementReadSnapshot.objects.values_list("platform", flat=True)) == ["user"]
    # And a restore never writes a bitmap back for a platform it no longer targets.
    keyspace_flush()
    readmodel.clear_local_cache()
    call_command("notices_rebuild", stdout=StringIO())
    assert redis.exists(keys.notice_bitmap("customer", 0, a.pk)) == 0
