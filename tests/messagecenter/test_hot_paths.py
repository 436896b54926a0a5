"""The hot paths: push fan-out in batched deliver.lua calls (live
events from inside the script), and the one-round-trip page and counts that
fall back to planning whenever something global moved."""

import json
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis.client
from django.test import override_settings
from redis.crc import key_slot

from core.local_cache import local_caches_clear
from core.redis import get_redis, is_cluster
from live import keys as live_keys
from live import transport as live_transport
from messagecenter import fill, services
from messagecenter import keys as mc_keys
from messagecenter.models import Message
from messagecenter.readmodel import InboxEntry, bits, inbox, publish
from messagecenter.selectors import inbox_counts, inbox_list
from tests.conftest import round_trips
from tests.factories import UserFactory
from tests.fixtures.readmodel import script_cache_flush
from tests.messagecenter.conftest import make_group, send

pytestmark = pytest.mark.django_db(transaction=True)
SINGLE_REDIS = pytest.mark.not_on_cluster(
    reason="pub/sub events and the one-round-trip reads are single-Redis features (a cluster plans every read)"
)

MONTH = 202611


def _entry(ref: str = "m900", *, offset: int = 7, score: int = 1_790_000_000_000, expire_ms: int = 0) -> InboxEntry:
    return InboxEntry(ref=ref, category="promotion", month=MONTH, offset=offset, score=score, expire_ms=expire_ms)


# --- fan-out -----------------------------------------------------------------------


def test_deliver_keys_are_the_named_keys() -> None:
    for prefix in ("test:", "other:"):
        with override_settings(MESSAGECENTER_KEY_PREFIX=prefix):
            names = mc_keys.deliver_keys([42, 7], notifications=True)
            assert names == [
                name
                for user_id in (42, 7)
                for name in (
                    mc_keys.inbox(user_id),
                    mc_keys.inbox_hidden(user_id),
                    mc_keys.inbox_arrivals(user_id),
                    mc_keys.inbox_expiry(user_id),
                    mc_keys.inbox_months(user_id),
                    live_keys.user_version(user_id),
                    mc_keys.inbox_evicted(user_id),
                    mc_keys.user_notifications(user_id),
                )
            ]
            assert names[0].startswith(prefix)
            assert mc_keys.deliver_keys([42]) == names[:7]
            assert mc_keys.deliver_keys([]) == []
            assert live_keys.user_channels([1, 42]) == [live_keys.user_channel(1), live_keys.user_channel(42)]
    # One recipient's keys map to one cluster slot (deliver.lua groups calls by slot there).
    assert len({key_slot(k.encode()) for k in mc_keys.deliver_keys([42], notifications=True)}) == 1


def test_batched_fanout_matches_one_inbox_at_a_time(monkeypatch: pytest.MonkeyPatch, redis: Any) -> None:
    monkeypatch.setattr(publish, "DELIVER_BATCH", 2)  # five recipients: three script calls, one pipeline
    users = [UserFactory() for _ in range(5)]
    hider, reader = users[1], users[2]
    entry = _entry()
    publish.user_hidden_add(user_id=hider.pk, refs=[entry.ref])
    redis.setbit(mc_keys.read_bitmap(reader.pk, MONTH), entry.offset, 1)  # e.g. restored read state

    gained = publish.inbox_deliver(entry=entry, user_ids=[u.pk for u in users], now_ms=1)
    assert gained == 4
    for user in users:
        counts = inbox.inbox_counts(user_id=user.pk, now_ms=2)
        expected = 0 if user in (hider, reader) else 1
        assert counts.unread_by_category["promotion"] == expected, user
        assert redis.zscore(mc_keys.inbox(user.pk), entry.member) == (None if user is hider else entry.score)
        assert (entry.offset in bits.read_many([mc_keys.push_bitmap(user.pk, MONTH)])[0]) == (user is not hider)
        assert live_transport.user_version(user_id=user.pk) == (0 if user is hider else 1)
    assert {m.decode() for m in redis.smembers(mc_keys.inbox_months(users[0].pk))} == {str(MONTH)}

    # A rerun (retried task) changes nothing: no inbox gains it, no version moves.
    assert publish.inbox_deliver(entry=entry, user_ids=[u.pk for u in users], now_ms=3) == 0
    assert [live_transport.user_version(user_id=u.pk) for u in users] == [1, 0, 1, 1, 1]


@SINGLE_REDIS
def test_each_recipient_hears_of_the_delivery_from_the_script(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(publish, "DELIVER_BATCH", 2)
    users = [UserFactory() for _ in range(3)]
    live_transport.inbox_changed(user_ids=[users[2].pk], reason="read")  # version 1 before the delivery
    subscriptions = [live_transport.subscribe(user_id=u.pk) for u in users]
    pubsubs = [s.__enter__() for s in subscriptions]
    try:
        publish.inbox_deliver(entry=_entry(), user_ids=[u.pk for u in users], now_ms=1)
        got = []
        for pubsub in pubsubs:
            deadline, event = time.monotonic() + 2, None
            while event is None and time.monotonic() < deadline:
                event = live_transport.decode_event(pubsub.get_message(timeout=0.2))
            got.append(event)
    finally:
        for subscription in subscriptions:
            subscription.__exit__(None, None, None)
    assert got == [{"v": 1, "reason": "deliver"}, {"v": 1, "reason": "deliver"}, {"v": 2, "reason": "deliver"}]


@SINGLE_REDIS
def test_only_listened_channels_get_the_event_and_every_version_still_moves(monkeypatch: pytest.MonkeyPatch) -> None:
    # deliver.lua asks PUBSUB NUMSUB once per call and publishes only where
    # someone listens: listeners at every position of a call (first, middle,
    # last) and recipients without one in between, two calls of four.
    monkeypatch.setattr(publish, "DELIVER_BATCH", 4)
    users = [UserFactory() for _ in range(8)]
    live_transport.inbox_changed(user_ids=[users[5].pk], reason="read")  # version 1 before the delivery
    listened = [users[0], users[2], users[3], users[5]]
    subscriptions = [live_transport.subscribe(user_id=u.pk) for u in listened]
    pubsubs = [s.__enter__() for s in subscriptions]
    try:
        assert publish.inbox_deliver(entry=_entry(), user_ids=[u.pk for u in users], now_ms=1) == 8
        got = []
        for pubsub in pubsubs:
            events: list[Any] = []
            deadline = time.monotonic() + 1
            while time.monotonic() < deadline and len(events) < 2:
                event = live_transport.decode_event(pubsub.get_message(timeout=0.1))
                if event is not None:
                    events.append(event)
            got.append(events)
    finally:
        for subscription in subscriptions:
            subscription.__exit__(None, None, None)
    # Exactly one event each, carrying the version the delivery gave that recipient.
    assert got == [[{"v": 1, "reason": "deliver"}]] * 3 + [[{"v": 2, "reason": "deliver"}]]
    assert [live_transport.user_version(user_id=u.pk) for u in users] == [1, 1, 1, 1, 1, 2, 1, 1]
    for user in users:
        assert inbox.inbox_counts(user_id=user.pk, now_ms=2).unread_by_category["promotion"] == 1


def test_nothing_subscribes_by_pattern() -> None:
    # deliver.lua counts a channel's listeners with PUBSUB NUMSUB, which leaves
    # out pattern subscriptions: a PSUBSCRIBE would miss fan-out events.
    root = Path(__file__).resolve().parents[2]
    users = [
        path
        for app in ("core", "audit", "insight", "accounts", "webhooks", "live", "messagecenter", "notices", "config")
        for path in (root / app).rglob("*.py")
        if "psubscribe" in path.read_text(encoding="utf-8").lower()
    ]
    assert users == []


def test_expired_items_are_not_delivered(redis: Any) -> None:
    user = UserFactory()
    entry = _entry(expire_ms=1000)
    assert publish.inbox_deliver(entry=entry, user_ids=[user.pk], now_ms=1000) == 0
    assert redis.zcard(mc_keys.inbox(user.pk)) == 0
    assert publish.inbox_deliver(entry=entry, user_ids=[user.pk], now_ms=999) == 1
    assert redis.zscore(mc_keys.inbox_expiry(user.pk), entry.member) == 1000


def test_notification_fanout_indexes_for_the_sweep(operator: Any, redis: Any, clock: Any) -> None:
    users = [UserFactory() for _ in range(3)]
    group = make_group("warehouse", *users)
    services.message_type_create(code="stock", name="Stock")
    services.subscription_create(message_type="stock", scope="WH1", group_id=group.pk)
    notification = services.notification_send(message_type="stock", scope="WH1", title="Low", body_html="<p>x</p>")
    member = f"{notification.ref}|system|{notification.slot_month}|{notification.slot_offset}"
    holders = {int(u) for u in redis.smembers(mc_keys.notification_holders())}
    assert holders == {u.pk for u in users}
    for user in users:
        assert redis.zscore(mc_keys.user_notifications(user.pk), member) is not None
        assert inbox_counts(user=user)["by_category"]["system"] == 1
    clock.advance(days=400)
    assert services.notification_sweep()["removed"] == 3
    assert all(inbox_counts(user=u)["by_category"]["system"] == 0 for u in users)


def test_unknown_category_is_refused_before_redis() -> None:
    with pytest.raises(ValueError, match="category"):
        publish.inbox_deliver(entry=InboxEntry("m1", "gossip", MONTH, 1, 1), user_ids=[1], now_ms=0)


@pytest.mark.cluster
def test_fanout_on_a_real_cluster(redis_cluster_url: str) -> None:
    from redis.cluster import RedisCluster

    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    user_ids = list(range(1, 41))  # spread over many slots
    try:
        with override_settings(MESSAGECENTER_REDIS_CLUSTER_URL=redis_cluster_url, MESSAGECENTER_KEY_PREFIX=prefix):
            assert publish.inbox_deliver(entry=_entry(), user_ids=user_ids, now_ms=1, notification=True) == 40
            assert publish.inbox_deliver(entry=_entry(), user_ids=user_ids, now_ms=1, notification=True) == 0
            for user_id in (1, 17, 40):
                assert inbox.inbox_counts(user_id=user_id, now_ms=2).unread_by_category["promotion"] == 1
                assert live_transport.user_version(user_id=user_id) == 1
    finally:
        probe = RedisCluster.from_url(redis_cluster_url, socket_connect_timeout=0.3)
        for node in probe.get_primaries():
            client = probe.get_redis_connection(node)
            for key in client.scan_iter(match=f"{prefix}*", count=1000):
                client.delete(key)
        probe.close()


# --- page and counts in one round trip -----------------------------------------------


@pytest.fixture
def fresh_hints() -> Iterator[None]:
    local_caches_clear()
    yield
    local_caches_clear()


def _page(user: Any) -> tuple[list[tuple[str, bool, str]], int, int]:
    page = inbox_list(user=user, limit=50)
    return [(i.id, i.read, i.title) for i in page.results], page.unread_count, page.unseen_count


@SINGLE_REDIS
@pytest.mark.usefixtures("fresh_hints")
def test_a_settled_inbox_answers_in_one_round_trip(operator: Any, recipient: Any) -> None:
    for i in range(3):
        send(operator, to={"users": [recipient]}, title=f"T{i}")
    services.inbox_mark_read(user=recipient, item_id=inbox_list(user=recipient).results[0].id)
    before = _page(recipient)  # plans (first sight of this user in the process)
    with round_trips() as trips:
        again = _page(recipient)
    assert trips[0] == 1
    assert again == before
    assert [title for _id, _read, title in again[0]] == ["T2", "T1", "T0"]
    assert again[1] == 2
    with round_trips() as trips:
        counts = inbox.inbox_counts(user_id=recipient.pk, now_ms=int(time.time() * 1000))
    assert trips[0] == 1
    assert counts.unread == 2


@SINGLE_REDIS
@pytest.mark.usefixtures("fresh_hints")
def test_a_fill_and_the_first_read_after_it_take_no_round_trip_for_nothing(
    operator: Any, recipient: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fill drops the user's part and leaves the merge of what users share to
    the first read, so that read plans: the months hint the process held is
    forgotten (a fast call would only answer STALE). The fill itself: the
    lock with the removal version and the key names the drop needs, the
    UNLINK, the read state, which of the items' details Redis lacks (none
    here: nothing more to write), the items, the filled mark and the unlock,
    each one round trip
    (no SCRIPT EXISTS before a pipeline of scripts: redis-py sends it on the
    pipeline's connection, which the round trip count does not see)."""
    for i in range(3):
        send(operator, to={"users": [recipient]}, title=f"T{i}")
    services.inbox_mark_read(user=recipient, item_id=inbox_list(user=recipient).results[0].id)
    assert fill.inbox_fill(user_id=recipient.pk)  # its scripts loaded (a flushed cache costs a reload)
    before = _page(recipient)
    assert recipient.pk in inbox.months_hints

    def script_exists(_pipe: Any) -> None:
        raise AssertionError("a pipeline sent SCRIPT EXISTS first")

    monkeypatch.setattr(redis.client.Pipeline, "load_scripts", script_exists)
    with round_trips() as trips:
        assert fill.inbox_fill(user_id=recipient.pk)
    assert trips[0] == 7
    assert recipient.pk not in inbox.months_hints
    with round_trips() as trips:
        again = _page(recipient)
    # The plan's reads (two), then its settle and merge and the fast page in one pipeline.
    assert trips[0] == 3
    assert again == before


@SINGLE_REDIS
def test_a_fill_after_the_script_cache_was_flushed_restores_the_read_state(
    operator: Any, recipient: Any, redis: Any
) -> None:
    """The fill's read state calls go as bare EVALSHAs: refused with NOSCRIPT
    (a restarted Redis), each runs again, loaded; nothing is lost."""
    for i in range(2):
        send(operator, to={"users": [recipient]}, title=f"T{i}")
    services.inbox_mark_read(user=recipient, item_id=inbox_list(user=recipient).results[0].id)
    before = _page(recipient)
    script_cache_flush(redis)
    assert fill.inbox_fill(user_id=recipient.pk)
    assert _page(recipient) == before
    assert [read for _id, read, _title in before[0]] == [True, False]


@SINGLE_REDIS
@pytest.mark.usefixtures("fresh_hints")
def test_a_level_inbox_this_process_has_no_hint_of_takes_the_fast_path_after_planning(
    operator: Any, recipient: Any, clock: Any
) -> None:
    for i in range(3):
        # Apart in time: items of one time list by member, whose order shifts
        # as ids gain a digit (what earlier tests created decides).
        clock.advance(seconds=1)
        send(operator, to={"users": [recipient]}, title=f"T{i}")
    services.inbox_mark_read(user=recipient, item_id=inbox_list(user=recipient).results[0].id)
    before = _page(recipient)
    local_caches_clear()  # a process that has not seen the user yet (after a restart)
    with round_trips() as trips:
        again = _page(recipient)
    # The plan's reads, then the fast path's call, which brings the details
    # along (the planned path's script would need a third for them).
    assert trips[0] == 2
    assert again == before
    assert inbox.months_hints[recipient.pk] == (str(MONTH),)
    local_caches_clear()
    with round_trips() as trips:
        counts = inbox.inbox_counts(user_id=recipient.pk, now_ms=int(clock.now.timestamp() * 1000))
    assert trips[0] == 2
    assert counts.unread == 2

    # Something to merge (a message to everyone): the plan merges, then the fast path reads.
    clock.advance(seconds=1)
    send(operator, to={"everyone": True}, title="pull")
    local_caches_clear()
    with round_trips() as trips:
        rows, unread, _unseen = _page(recipient)
    # The plan's reads (the pull log in a second), then its merge and the fast
    # page (with the details) in one pipeline.
    assert trips[0] == 3
    assert [t for _i, _r, t in rows] == ["pull", "T2", "T1", "T0"]
    assert unread == 3


@pytest.mark.usefixtures("fresh_hints")
def test_the_fast_path_steps_aside_when_anything_moved(
    operator: Any, recipient: Any, other_recipient: Any, clock: Any
) -> None:
    pushed = send(operator, to={"users": [recipient]}, title="push")
    _page(recipient)

    # A new pull item (global marker): merged on the next read.
    clock.advance(seconds=1)
    pulled = send(operator, to={"everyone": True}, title="pull")
    assert [t for _i, _r, t in _page(recipient)[0]] == ["pull", "push"]

    # A bulletin: merged as well.
    clock.advance(seconds=1)
    services.bulletin_create(title="bulletin", body_html="<p>b</p>", display_time=clock.now, actor=operator)
    assert [t for _i, _r, t in _page(recipient)[0]] == ["bulletin", "pull", "push"]

    # A retraction: settled.
    services.message_retract(message=pushed, actor=operator)
    assert [t for _i, _r, t in _page(recipient)[0]] == ["bulletin", "pull"]
    assert inbox_counts(user=recipient)["unread"] == 2

    # A scheduled bulletin whose time comes (no write at all, only the clock).
    services.bulletin_create(
        title="later", body_html="<p>l</p>", display_time=clock.now + timedelta(minutes=5), actor=operator
    )
    assert [t for _i, _r, t in _page(recipient)[0]] == ["bulletin", "pull"]
    clock.advance(minutes=6)
    assert [t for _i, _r, t in _page(recipient)[0]] == ["later", "bulletin", "pull"]

    # A group change drops merged bulletins; the next read merges what is visible now.
    group = make_group("team", recipient)
    services.bulletin_create(
        title="team only", body_html="<p>t</p>", display_time=clock.now, group_ids=[group.pk], actor=operator
    )
    assert [t for _i, _r, t in _page(recipient)[0]][:1] == ["team only"]
    services.user_group_remove_members(group=group, user_ids=[recipient.pk])
    assert "team only" not in [t for _i, _r, t in _page(recipient)[0]]
    assert pulled.ref in [i for i, _r, _t in _page(other_recipient)[0]]


@pytest.mark.usefixtures("fresh_hints")
def test_a_new_month_makes_the_hint_stale(operator: Any, recipient: Any, clock: Any) -> None:
    send(operator, to={"users": [recipient]}, title="November")
    services.inbox_mark_read(user=recipient, item_id=inbox_list(user=recipient).results[0].id)
    assert inbox.months_hints[recipient.pk] == (str(MONTH),)
    clock.advance(days=15)  # December: the item's bits live in another month's bitmaps
    send(operator, to={"users": [recipient]}, title="December")
    rows, unread, _unseen = _page(recipient)
    assert [(t, r) for _i, r, t in rows] == [("December", False), ("November", True)]
    assert unread == 1
    assert inbox.months_hints[recipient.pk] == (str(MONTH), str(MONTH + 1))


@pytest.mark.usefixtures("fresh_hints")
def test_expiry_is_settled_on_the_fast_path(operator: Any, recipient: Any, clock: Any) -> None:
    send(operator, to={"users": [recipient]}, title="soon gone", expire_at=clock.now + timedelta(minutes=1))
    send(operator, to={"users": [recipient]}, title="stays")
    assert _page(recipient)[1] == 2
    clock.advance(minutes=2)
    with round_trips() as trips:
        rows, unread, _unseen = _page(recipient)
    assert trips[0] == (3 if is_cluster() else 1)  # a cluster plans (pipeline, script, details)
    assert [t for _i, _r, t in rows] == ["stays"]
    assert unread == 1
    assert get_redis().zcard(mc_keys.inbox_expiry(recipient.pk)) == 0


@pytest.mark.usefixtures("fresh_hints")
def test_fast_and_planned_answers_agree(
    operator: Any, recipient: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(25):
        message = send(operator, to={"users": [recipient]}, title=f"T{i}", category=("system", "promotion")[i % 2])
        if i % 3 == 0:
            services.inbox_mark_read(user=recipient, item_id=message.ref)
    _page(recipient)
    now_ms = int(clock.now.timestamp() * 1000)

    def both(**query: Any) -> tuple[Any, Any]:
        args: dict[str, Any] = {
            "category": None,
            "max_score": None,
            "skip": 0,
            "limit": 7,
            "unread_only": False,
            "since_ms": None,
        }
        args.update(query)
        fast = inbox.inbox_page(user_id=recipient.pk, now_ms=now_ms, **args)
        local_caches_clear()
        with monkeypatch.context() as patched:
            # The planned path's own script, not the fast path a level inbox takes after planning.
            patched.setattr(inbox, "_fast_planned", lambda *_args: None)
            planned = inbox.inbox_page(user_id=recipient.pk, now_ms=now_ms, **args)
        return fast, planned

    for query in ({}, {"category": "promotion"}, {"unread_only": True}, {"limit": 100}):
        fast, planned = both(**query)
        assert fast == planned, query
        assert json.dumps([r.detail for r in fast.rows])  # details came along
    first, _planned = both(limit=7)
    assert first.next_position is not None
    fast, planned = both(max_score=first.next_position[0], skip=first.next_position[1])
    assert fast == planned
    assert len(fast.rows) == 7


# --- fan-out bookkeeping -----------------------------------------------------------------


@pytest.mark.parametrize("everyone", [False, True], ids=["push chunk", "pull"])
def test_a_retraction_racing_the_delivery_still_wins(
    monkeypatch: pytest.MonkeyPatch, operator: Any, recipient: Any, clock: Any, everyone: bool
) -> None:
    from messagecenter.models import FanoutChunk, Message, MessageStatus
    from messagecenter.services import messages

    real_deliver, real_pull = messages.inbox_deliver, messages.inbox_publish_pull
    message_id: list[int] = []

    def retract_first(real: Any) -> Any:
        def run(**kwargs: Any) -> Any:
            # The retraction commits, and its removal runs, before our write lands.
            services.message_retract(message=Message.objects.get(pk=message_id[0]), actor=operator)
            return real(**kwargs)

        return run

    monkeypatch.setattr(messages, "inbox_deliver", retract_first(real_deliver))
    monkeypatch.setattr(messages, "inbox_publish_pull", retract_first(real_pull))
    monkeypatch.setattr(messages.Message.objects, "create", _remember(messages.Message.objects.create, message_id))
    message = send(operator, to={"everyone": True} if everyone else {"users": [recipient]})
    assert message.status == MessageStatus.RETRACTED
    assert inbox_list(user=recipient).results == []
    assert inbox_counts(user=recipient)["unread"] == 0
    assert FanoutChunk.objects.filter(message=message).count() == (0 if everyone else 1)


def _remember(create: Any, into: list[int]) -> Any:
    def run(**kwargs: Any) -> Any:
        row = create(**kwargs)
        into.append(row.pk)
        return row

    return run


def test_the_last_chunk_marks_the_message_delivered(monkeypatch: pytest.MonkeyPatch, operator: Any, clock: Any) -> None:
    from messagecenter.models import FanoutChunk, MessageStatus

    users = [UserFactory() for _ in range(5)]
    with override_settings(MESSAGECENTER_FANOUT_CHUNK=2):
        message = send(operator, to={"users": users})
        assert message.status == MessageStatus.DELIVERED
        assert sorted(FanoutChunk.objects.filter(message=message).values_list("size", flat=True)) == [1, 2, 2]
        services.message_fanout_chunk(message=message, index=1)  # a retried chunk changes nothing
    assert FanoutChunk.objects.filter(message=message).count() == 3
    assert all(inbox_counts(user=u)["unread"] == 1 for u in users)


@SINGLE_REDIS
@pytest.mark.usefixtures("fresh_hints")
def test_read_all_on_a_settled_inbox_skips_planning(operator: Any, recipient: Any, clock: Any) -> None:
    for i in range(3):
        send(operator, to={"users": [recipient]}, title=f"T{i}")
    _page(recipient)
    now_ms = int(clock.now.timestamp() * 1000)
    redis = get_redis()
    version = live_transport.user_version(user_id=recipient.pk)
    with round_trips() as trips:
        assert inbox.inbox_read_all(user_id=recipient.pk, category=None, now_ms=now_ms) == 3
    # One pipeline: the script (it queues the first reads itself) and the live event.
    assert trips[0] == 1
    assert _page(recipient)[1] == 0
    assert redis.llen(mc_keys.first_reads_pending()) == 1
    assert live_transport.user_version(user_id=recipient.pk) == version + 1
    services.inbox_first_reads_fold()
    refs = [f"m{m.pk}" for m in Message.objects.filter(title__in=["T0", "T1", "T2"])]
    assert all(redis.hgetall(mc_keys.item_read_hours(ref)) for ref in refs)
    # Something global moved (a pull item): planned, and the new item is read too.
    send(operator, to={"everyone": True}, title="pull")
    assert inbox.inbox_read_all(user_id=recipient.pk, category=None, now_ms=now_ms) == 1
    rows, unread, _unseen = _page(recipient)
    assert sorted(t for _i, _r, t in rows) == ["T0", "T1", "T2", "pull"]
    assert all(read for _i, read, _t in rows)
    assert unread == 0


@SINGLE_REDIS
@pytest.mark.usefixtures("fresh_hints")
def test_counts_with_announcements_take_one_round_trip(operator: Any, recipient: Any) -> None:
    from accounts.services import user_set_platforms
    from notices.models import Announcement
    from notices.services import announcement_create, announcement_mark_read

    user_set_platforms(user=recipient, platforms=["user"])
    for i in range(3):
        send(operator, to={"users": [recipient]}, title=f"T{i}")
    made = [
        announcement_create(author=operator, title=f"A{i}", body_html="<p>x</p>", platforms=["user"]) for i in range(4)
    ]
    announcement_mark_read(user=recipient, announcement_id=made[0].pk)
    user = type(recipient).objects.get(pk=recipient.pk)
    assert inbox_counts(user=user)["by_category"]["announcement"] == 3  # plans, computes the cached count
    with round_trips() as trips:
        counts = inbox_counts(user=user)
    assert trips[0] == 1
    assert counts["unread"] == 3
    assert counts["by_category"]["announcement"] == 3
    assert Announcement.objects.count() == 4


def test_a_bounded_read_all_marks_up_to_its_bound_and_leaves_newer_unread_items(
    operator: Any, recipient: Any, clock: Any
) -> None:
    """The Redis half of a committed "read all" is bounded by the time it was
    asked: with nothing unread past the bound the bit operations mark it all;
    an item that arrived past the bound stays unread (the walk)."""
    for i in range(3):
        clock.advance(seconds=1)
        send(operator, to={"users": [recipient]}, title=f"T{i}")
    _page(recipient)
    bound = int(clock.now.timestamp() * 1000)
    assert inbox.inbox_read_all(user_id=recipient.pk, category=None, now_ms=bound, max_score=bound) == 3
    assert _page(recipient)[1] == 0
    clock.advance(seconds=1)
    send(operator, to={"users": [recipient]}, title="T3")
    send(operator, to={"users": [recipient]}, title="T4")
    _page(recipient)
    assert inbox.inbox_read_all(user_id=recipient.pk, category=None, now_ms=bound, max_score=bound) == 0
    rows, unread, _unseen = _page(recipient)
    assert unread == 2
    assert sorted(t for _i, read, t in rows if not read) == ["T3", "T4"]
    later = int(clock.now.timestamp() * 1000)
    assert inbox.inbox_read_all(user_id=recipient.pk, category=None, now_ms=later, max_score=later) == 2
    assert _page(recipient)[1] == 0
