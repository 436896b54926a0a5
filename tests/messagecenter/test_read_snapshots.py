"""Durable inbox read state: dirty tracking, the snapshot job, restore on rebuild.

After Redis is flushed and rebuilt, read flags, unread counts per category and
the unseen count equal what they were at the last snapshot.
"""

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import DatabaseError
from pyroaring import BitMap

from core import keys
from core.platforms import ALL_PLATFORMS
from core.redis import keyspace_flush
from messagecenter import services
from messagecenter.models import InboxReadSnapshot, InboxSeenSnapshot
from messagecenter.readmodel import snapshots as readmodel
from messagecenter.selectors import inbox_counts, inbox_list
from messagecenter.services import rebuild
from messagecenter.services.snapshots import inbox_read_restore, inbox_read_snapshot
from messagecenter.tasks import read_snapshot_task
from tests.factories import UserFactory
from tests.fixtures.readmodel import keyspace_scan
from tests.messagecenter.conftest import make_group, send

pytestmark = pytest.mark.django_db


def dirty(redis: Any) -> set[str]:
    return {m.decode() for m in redis.smembers(keys.mc_snapshot_dirty())}


def state(user: Any) -> dict[str, Any]:
    page = inbox_list(user=user, limit=50)
    counts = inbox_counts(user=user)
    return {
        "read": {item.id: item.read for item in page.results},
        "unread": counts["unread"],
        "unseen": counts["unseen"],
        "by_category": counts["by_category"],
    }


def test_every_read_state_write_notes_what_changed(operator: Any, recipient: Any, redis: Any, clock: Any) -> None:
    message = send(operator, to={"users": [recipient]})
    month = message.slot_month
    assert dirty(redis) == set()  # a delivery is not read state
    services.inbox_mark_read(user=recipient, item_id=message.ref)
    assert dirty(redis) == {f"{recipient.pk}:{month}"}
    redis.delete(keys.mc_snapshot_dirty())
    services.inbox_mark_unread(user=recipient, item_id=message.ref)
    assert dirty(redis) == {f"{recipient.pk}:{month}"}
    redis.delete(keys.mc_snapshot_dirty())
    assert services.inbox_mark_all_read(user=recipient) == 1
    assert dirty(redis) == {f"{recipient.pk}:{month}"}
    redis.delete(keys.mc_snapshot_dirty())
    assert services.inbox_mark_all_read(user=recipient) == 0
    # Nothing changed: the one-round-trip "read all" notes its months before
    # the script's answer is known, which costs the job one re-copy at most.
    assert dirty(redis) <= {f"{recipient.pk}:{month}"}
    redis.delete(keys.mc_snapshot_dirty())
    services.inbox_mark_seen(user=recipient)
    assert dirty(redis) == {f"{recipient.pk}:seen"}


def test_the_job_copies_only_dirty_state(
    operator: Any, recipient: Any, other_recipient: Any, redis: Any, clock: Any
) -> None:
    first = send(operator, to={"users": [recipient, other_recipient]})
    second = send(operator, to={"users": [recipient]}, category="promotion")
    services.inbox_mark_read(user=recipient, item_id=first.ref)
    services.inbox_mark_read(user=recipient, item_id=second.ref)
    services.inbox_mark_unread(user=recipient, item_id=second.ref)
    services.inbox_mark_seen(user=recipient)
    assert inbox_read_snapshot() == 2
    row = InboxReadSnapshot.objects.get()
    assert (row.user_id, row.month) == (recipient.pk, first.slot_month)
    assert set(BitMap.deserialize(bytes(row.read))) == {first.slot_offset}
    # "unread" clears the read bit only: the ever-read bitmap keeps both.
    assert set(BitMap.deserialize(bytes(row.ever))) == {first.slot_offset, second.slot_offset}
    seen = InboxSeenSnapshot.objects.get()
    assert seen.user_id == recipient.pk
    assert seen.seen_ms == int(redis.hget(keys.mc_inbox_state(recipient.pk), "seen"))
    assert dirty(redis) == set()
    assert read_snapshot_task() == 0  # nothing dirty: nothing written


def _scenario(operator: Any, recipient: Any, other_recipient: Any, clock: Any) -> dict[str, Any]:
    """Push, pull and bulletin items over three categories; some read, the watermark set."""
    group = make_group("vip", recipient)
    bulletin = services.bulletin_create(title="B", body_html="", display_time=clock.now, group_ids=[group.pk])
    clock.advance(minutes=1)
    promo = send(operator, to={"users": [recipient]}, category="promotion")
    clock.advance(minutes=1)
    pull = send(operator, to={"users": [recipient, other_recipient]}, category="transaction")
    clock.advance(minutes=1)
    system = send(operator, to={"users": [recipient]})
    clock.advance(minutes=1)
    everyone = send(operator, to={"everyone": True}, category="interaction")
    for ref in (bulletin.ref, promo.ref, everyone.ref):
        services.inbox_mark_read(user=recipient, item_id=ref)
    services.inbox_mark_read(user=other_recipient, item_id=pull.ref)
    services.inbox_mark_seen(user=recipient)
    clock.advance(minutes=1)
    newest = send(operator, to={"users": [recipient]})  # unseen after the watermark
    return {"system": system, "pull": pull, "newest": newest, "promo": promo}


def test_flush_then_rebuild_restores_read_state_as_of_the_snapshot(
    operator: Any, recipient: Any, other_recipient: Any, clock: Any, settings: Any
) -> None:
    settings.MESSAGECENTER_PUSH_THRESHOLD = 1  # two or more recipients: pull
    items = _scenario(operator, recipient, other_recipient, clock)
    inbox_read_snapshot()
    expected = {u.pk: state(u) for u in (recipient, other_recipient)}
    assert expected[recipient.pk]["unseen"] == 1
    assert expected[recipient.pk]["by_category"] == {
        "system": 2,
        "promotion": 0,
        "transaction": 1,
        "interaction": 0,
        "announcement": 0,
    }
    # After the snapshot: lost with Redis, and only these.
    services.inbox_mark_read(user=recipient, item_id=items["system"].ref)
    services.inbox_mark_unread(user=recipient, item_id=items["promo"].ref)
    services.inbox_mark_seen(user=recipient)
    assert state(recipient) != expected[recipient.pk]

    keyspace_flush()
    call_command("messagecenter_rebuild", stdout=StringIO())
    assert {u.pk: state(u) for u in (recipient, other_recipient)} == expected


def test_items_already_in_the_inbox_are_counted_against_the_restored_bits(
    operator: Any, recipient: Any, other_recipient: Any, clock: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Items that reached the inbox before the read state came back (a rebuild
    # racing a restore, a fan-out retried after the loss) were counted unread
    # against a missing bitmap: the restore sets their bits and moves their
    # counters in the same script.
    settings.MESSAGECENTER_PUSH_THRESHOLD = 1
    _scenario(operator, recipient, other_recipient, clock)
    inbox_read_snapshot()
    expected = state(recipient)
    keyspace_flush()
    monkeypatch.setattr(rebuild, "inbox_read_restore", lambda **kwargs: 0)
    call_command("messagecenter_rebuild", stdout=StringIO())
    merged = state(recipient)
    assert merged["unread"] == expected["unread"] + 3
    assert not any(merged["read"].values())
    monkeypatch.undo()
    assert inbox_read_restore() > 0
    assert state(recipient) == expected


def test_a_rebuild_while_serving_keeps_newer_marks(operator: Any, recipient: Any, clock: Any) -> None:
    first = send(operator, to={"users": [recipient]})
    second = send(operator, to={"users": [recipient]}, category="promotion")
    services.inbox_mark_read(user=recipient, item_id=first.ref)
    services.inbox_mark_seen(user=recipient)
    inbox_read_snapshot()
    services.inbox_mark_unread(user=recipient, item_id=first.ref)
    services.inbox_mark_read(user=recipient, item_id=second.ref)
    clock.advance(minutes=5)
    services.inbox_mark_seen(user=recipient)
    now = state(recipient)
    assert inbox_read_restore() == 0  # every key is there: nothing overwritten
    call_command("messagecenter_rebuild", "--quiet", stdout=StringIO())
    assert state(recipient) == now
    assert now["read"] == {first.ref: False, second.ref: True}


def _dump(redis: Any) -> dict[str, Any]:
    """Every key with its value, except the markers a rebuild refreshes by design
    (index tokens, revisions, bulletin change times, live versions and inbox revs, restore markers)
    and the inbox read caches (tagged with those markers: a rebuild makes them stale by design)."""
    ignored = {keys.notice_snapshot_restored(), keys.mc_snapshot_restored(), keys.mc_bulletin_update_time()}
    for platform in ALL_PLATFORMS:
        ignored.add(keys.notice_revision(platform))
    # Every chunk's index meta (its token), whichever chunks the users' ids fall in.
    meta_head, meta_tail = keys.notice_meta("p", 0).split("{")[0], keys.notice_meta("p", 0).rsplit("}", 1)[1]
    version_prefix = keys.live_user_version(0).split("{")[0]
    access_prefix = keys.mc_bulletin_access_time(0).split("{")[0]
    read_cache = keys.mc_inbox_pages(0).split("}", 1)[1]
    dump: dict[str, Any] = {}
    for raw in keyspace_scan(redis, count=1000):
        key = raw.decode()
        if key in ignored or key.startswith((version_prefix, access_prefix)) or key.endswith(read_cache):
            continue
        if key.startswith(meta_head) and key.endswith(meta_tail):
            continue
        kind = redis.type(raw).decode()
        if kind == "string":
            dump[key] = redis.get(raw)
        elif kind == "hash":
            # An inbox's "rev" counts changes (the page cache's tag), like the live versions.
            dump[key] = {f: v for f, v in redis.hgetall(raw).items() if f != b"rev"}
        elif kind == "set":
            dump[key] = redis.smembers(raw)
        elif key == keys.mc_bulletin_changes():
            # The change log: the same configs, logged at the rebuild's change times.
            dump[key] = set(redis.zrange(raw, 0, -1))
        elif kind == "zset":
            dump[key] = redis.zrange(raw, 0, -1, withscores=True)
        else:
            dump[key] = kind
    return dump


def test_rebuilding_twice_changes_nothing(
    operator: Any, recipient: Any, other_recipient: Any, redis: Any, clock: Any, settings: Any
) -> None:
    settings.MESSAGECENTER_PUSH_THRESHOLD = 1
    _scenario(operator, recipient, other_recipient, clock)
    inbox_read_snapshot()
    keyspace_flush()
    call_command("rebuild_redis", "--quiet", stdout=StringIO())
    state(recipient)  # merges pull items and bulletins
    once = _dump(redis)
    assert any(key.startswith(keys.mc_read_bitmap(recipient.pk, "")[:-1]) for key in once)
    call_command("rebuild_redis", "--quiet", stdout=StringIO())
    state(recipient)
    assert _dump(redis) == once


def test_a_database_failure_puts_the_batch_back(
    operator: Any, recipient: Any, redis: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    message = send(operator, to={"users": [recipient]})
    inbox_read_snapshot()  # sets the restored marker
    services.inbox_mark_read(user=recipient, item_id=message.ref)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise DatabaseError("database is down")

    monkeypatch.setattr(InboxReadSnapshot.objects, "bulk_create", broken)
    with pytest.raises(DatabaseError):
        inbox_read_snapshot()
    assert dirty(redis) == {f"{recipient.pk}:{message.slot_month}"}
    monkeypatch.undo()
    assert inbox_read_snapshot() == 1
    assert InboxReadSnapshot.objects.get().user_id == recipient.pk


def test_a_redis_lost_mid_batch_writes_nothing(operator: Any, recipient: Any, redis: Any, clock: Any) -> None:
    message = send(operator, to={"users": [recipient]})
    services.inbox_mark_read(user=recipient, item_id=message.ref)
    inbox_read_snapshot()
    services.inbox_mark_unread(user=recipient, item_id=message.ref)
    redis.delete(keys.mc_snapshot_restored())  # what a flush between the reads leaves
    members = readmodel.snapshot_dirty_pop(count=10)
    assert readmodel.snapshot_read(members=members).intact is False
    readmodel.snapshot_dirty_return(members=members)
    row = InboxReadSnapshot.objects.get()
    assert set(BitMap.deserialize(bytes(row.read))) == {message.slot_offset}
    # The next run restores first (the bitmap is there: SET NX keeps it), then copies.
    assert inbox_read_snapshot() == 1
    row.refresh_from_db()
    assert set(BitMap.deserialize(bytes(row.read))) == set()


def test_state_of_deleted_users_and_empty_months_is_not_kept(operator: Any, redis: Any, clock: Any) -> None:
    gone: Any = UserFactory()
    kept: Any = UserFactory()
    message = send(operator, to={"users": [gone, kept]})
    for user in (gone, kept):
        services.inbox_mark_read(user=user, item_id=message.ref)
    inbox_read_snapshot()
    assert InboxReadSnapshot.objects.count() == 2
    services.inbox_mark_unread(user=gone, item_id=message.ref)
    gone.delete()  # rows cascade; the dirty note outlives the user
    redis.sadd(keys.mc_snapshot_dirty(), *readmodel.dirty_members(user_id=kept.pk, months=[190001]))
    assert inbox_read_snapshot() == 0
    assert list(InboxReadSnapshot.objects.values_list("user_id", flat=True)) == [kept.pk]


def test_restore_script_keys_share_one_cluster_slot() -> None:
    from redis.crc import key_slot

    months = ["202611", "202612"]
    script_keys = [keys.mc_inbox(42), keys.mc_inbox_counters(42), keys.mc_inbox_state(42)]
    script_keys += [keys.mc_read_bitmap(42, m) for m in months] + [keys.mc_read_ever_bitmap(42, m) for m in months]
    assert len({key_slot(k.encode()) for k in script_keys}) == 1


@pytest.mark.cluster
def test_snapshot_and_rebuild_on_a_real_cluster(
    redis_cluster_url: str, operator: Any, recipient: Any, other_recipient: Any, clock: Any, settings: Any
) -> None:
    import uuid

    from django.test import override_settings
    from redis.cluster import RedisCluster

    from notices import readmodel as notices_readmodel
    from notices.selectors import announcement_list
    from notices.services import announcement_mark_read
    from tests.notices.conftest import announce

    def wipe(prefix: str) -> None:
        probe = RedisCluster.from_url(redis_cluster_url, socket_connect_timeout=0.3)
        for node in probe.get_primaries():
            client = probe.get_redis_connection(node)
            for key in client.scan_iter(match=f"{prefix}*", count=1000):
                client.delete(key)
        probe.close()

    settings.MESSAGECENTER_PUSH_THRESHOLD = 1
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    try:
        with override_settings(MESSAGECENTER_REDIS_CLUSTER_URL=redis_cluster_url, MESSAGECENTER_KEY_PREFIX=prefix):
            notices_readmodel.clear_local_cache()
            a = announce(["user"], publish_at=clock.now)
            announcement_mark_read(user=other_recipient, announcement_id=a.pk)
            _scenario(operator, recipient, other_recipient, clock)
            call_command("snapshot_read_state", "--quiet", stdout=StringIO())
            expected = {u.pk: state(u) for u in (recipient, other_recipient)}
            flags = {item.announcement.pk: item.read for item in announcement_list(user=other_recipient, limit=9).items}
            assert flags == {a.pk: True}
            wipe(prefix)  # the cluster's "flush" of this test's keys
            notices_readmodel.clear_local_cache()
            call_command("rebuild_redis", "--quiet", stdout=StringIO())
            assert {u.pk: state(u) for u in (recipient, other_recipient)} == expected
            after = {item.announcement.pk: item.read for item in announcement_list(user=other_recipient, limit=9).items}
            assert after == flags
    finally:
        notices_readmodel.clear_local_cache()
        wipe(prefix)
