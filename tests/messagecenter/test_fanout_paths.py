"""Push fan-out at rate (the benchmark asks for at least 100,000 recipients a
second): deliver.lua sends the expiry zset's key only for items that expire,
eager Celery pushes the chunks of the message at hand in one transaction, and a
chunk's bookkeeping is two plain statements."""

import time
from typing import Any

import pytest
from django.db import IntegrityError, connection
from django.test.utils import CaptureQueriesContext
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from core.keys import fill_lock
from live import keys as live_keys
from live import transport as live_transport
from messagecenter import keys as mc_keys
from messagecenter import services, tasks
from messagecenter.models import FanoutChunk, Message, MessageStatus
from messagecenter.readmodel import InboxEntry, bits, inbox, publish
from messagecenter.readmodel.scripts import DELIVER_SCRIPT
from messagecenter.readmodel.user_part import users_held
from messagecenter.services import messages
from tests.factories import UserFactory
from tests.messagecenter.conftest import send

pytestmark = pytest.mark.django_db(transaction=True)

MONTH = 202611


def _entry(*, expire_ms: int = 0, ref: str = "m901", offset: int = 9) -> InboxEntry:
    return InboxEntry(
        ref=ref, category="system", month=MONTH, offset=offset, score=1_790_000_000_000, expire_ms=expire_ms
    )


# --- deliver.lua's key layout --------------------------------------------------------


def test_deliver_keys_leave_out_the_expiry_zset_only_when_asked() -> None:
    for notifications in (False, True):
        full = mc_keys.deliver_keys([42, 7], notifications=notifications)
        short = mc_keys.deliver_keys([42, 7], notifications=notifications, expiry=False)
        expiry = {mc_keys.inbox_expiry(42), mc_keys.inbox_expiry(7)}
        assert [k for k in full if k not in expiry] == short
        assert len(short) == 2 * (6 + notifications)
    assert mc_keys.deliver_keys([], expiry=False) == []


@pytest.mark.parametrize("notification", [False, True], ids=["inbox", "notification"])
@pytest.mark.parametrize("expire_ms", [0, 5_000], ids=["never expires", "expires"])
def test_every_key_of_the_layout_is_written(redis: Any, notification: bool, expire_ms: int) -> None:
    users = [UserFactory() for _ in range(3)]
    entry = _entry(expire_ms=expire_ms)
    ids_ = [u.pk for u in users]
    assert publish.inbox_deliver(entry=entry, user_ids=ids_, now_ms=1, notification=notification) == 3
    for user_id in ids_:
        assert redis.zscore(mc_keys.inbox(user_id), entry.member) == entry.score
        assert redis.zscore(mc_keys.inbox_arrivals(user_id), entry.member) == entry.score
        assert redis.smembers(mc_keys.inbox_months(user_id)) == {str(MONTH).encode()}
        assert live_transport.user_version(user_id=user_id) == 1
        # The expiry zset holds the item only when it expires; untouched otherwise.
        assert redis.zscore(mc_keys.inbox_expiry(user_id), entry.member) == (expire_ms or None)
        assert redis.exists(mc_keys.inbox_expiry(user_id)) == (1 if expire_ms else 0)
        notif = redis.zscore(mc_keys.user_notifications(user_id), entry.member)
        assert notif == (expire_ms if notification else None)
        # No key of another layout position was written by mistake, nor any the next read writes.
        assert redis.exists(mc_keys.read_bitmap(user_id, MONTH)) == 0
        assert redis.exists(mc_keys.inbox_hidden(user_id)) == 0
        assert redis.exists(mc_keys.inbox_evicted(user_id)) == 0
        assert redis.exists(mc_keys.inbox_category(user_id, "system"), mc_keys.inbox_counters(user_id)) == 0
        assert redis.exists(mc_keys.push_bitmap(user_id, MONTH), mc_keys.inbox_unread(user_id)) == 0
        # The next read places it: category zset, counter, push bit; the arrival is gone.
        assert inbox.inbox_counts(user_id=user_id, now_ms=2).unread_by_category["system"] == 1
        assert redis.zscore(mc_keys.inbox_category(user_id, "system"), entry.member) == entry.score
        assert redis.hget(mc_keys.inbox_counters(user_id), "system") == b"1"
        assert entry.offset in bits.read_many([mc_keys.push_bitmap(user_id, MONTH)])[0]
        assert redis.exists(mc_keys.inbox_arrivals(user_id)) == 0
    # Expiry is exact: once the time came, nobody gains it (the sweep index still learns it).
    if expire_ms:
        late = UserFactory()
        assert publish.inbox_deliver(entry=entry, user_ids=[late.pk], now_ms=expire_ms, notification=notification) == 0
        assert redis.exists(mc_keys.inbox(late.pk)) == 0
        assert redis.exists(mc_keys.user_notifications(late.pk)) == (1 if notification else 0)


def test_hidden_and_read_recipients_without_the_expiry_key(redis: Any) -> None:
    """The positions after the left-out key (months, push, read, version) are the right ones."""
    hider, reader, plain = (UserFactory() for _ in range(3))
    entry = _entry()
    publish.user_hidden_add(user_id=hider.pk, refs=[entry.ref])
    redis.setbit(mc_keys.read_bitmap(reader.pk, MONTH), entry.offset, 1)
    assert publish.inbox_deliver(entry=entry, user_ids=[hider.pk, reader.pk, plain.pk], now_ms=1) == 2
    assert inbox.inbox_counts(user_id=hider.pk, now_ms=2).unread_by_category["system"] == 0
    assert inbox.inbox_counts(user_id=reader.pk, now_ms=2).unread_by_category["system"] == 0
    assert inbox.inbox_counts(user_id=plain.pk, now_ms=2).unread_by_category["system"] == 1
    assert redis.zscore(mc_keys.inbox(reader.pk), entry.member) == entry.score
    assert [live_transport.user_version(user_id=u.pk) for u in (hider, reader, plain)] == [0, 1, 1]


@pytest.mark.parametrize("notification", [False, True], ids=["inbox", "notification"])
def test_a_delivery_to_held_parts_only_skips_the_parts_redis_does_not_hold(redis: Any, notification: bool) -> None:
    """``held_only`` (healing on): a recipient whose part Redis does not hold gets
    no key at all (their fill reads the item from the recipient rows); one filled
    (for whichever generation: a process may not know a newer one yet), and one
    whose fill runs (its lock held), are written as without it."""
    filled, older, filling, never, noted = (UserFactory() for _ in range(5))
    redis.hset(mc_keys.inbox_state(filled.pk), "fill", "7")
    redis.hset(mc_keys.inbox_state(older.pk), "fill", "6")
    redis.set(fill_lock(mc_keys.inbox_state(filling.pk)), "a-token")
    redis.hset(mc_keys.inbox_state(noted.pk), "w", "1")  # a write's note, no fill: not held
    entry = _entry(expire_ms=5_000)
    ids_ = [u.pk for u in (filled, older, filling, never, noted)]
    gained = publish.inbox_deliver(entry=entry, user_ids=ids_, now_ms=1, notification=notification, held_only=True)
    assert gained == 3
    for user in (filled, older, filling):
        assert redis.zscore(mc_keys.inbox(user.pk), entry.member) == entry.score
        assert redis.zscore(mc_keys.inbox_arrivals(user.pk), entry.member) == entry.score
        assert redis.zscore(mc_keys.inbox_expiry(user.pk), entry.member) == 5_000
        assert redis.exists(mc_keys.user_notifications(user.pk)) == int(notification)
        assert live_transport.user_version(user_id=user.pk) == 1
    for user in (never, noted):
        written = [
            mc_keys.inbox(user.pk),
            mc_keys.inbox_arrivals(user.pk),
            mc_keys.inbox_expiry(user.pk),
            mc_keys.inbox_months(user.pk),
            mc_keys.inbox_evicted(user.pk),
            mc_keys.user_notifications(user.pk),
            live_keys.user_version(user.pk),
        ]
        assert redis.exists(*written) == 0
    assert redis.exists(mc_keys.inbox_state(never.pk)) == 0
    assert users_held(user_ids=ids_) == {filled.pk, older.pk, filling.pk}  # the projections ask the same
    # Without it (healing off, a user's own fill) every recipient is written.
    assert publish.inbox_deliver(entry=entry, user_ids=[never.pk], now_ms=1, notification=notification) == 1
    assert redis.zscore(mc_keys.inbox(never.pk), entry.member) == entry.score


@pytest.mark.not_on_cluster(reason="pub/sub events are a single-Redis feature")
def test_a_page_that_listens_hears_of_a_push_its_unfilled_user_did_not_take(redis: Any) -> None:
    """A recipient not filled gets no key of the inbox, but a page of theirs that
    listens hears of the item (so it asks, and the asking fills the user)."""
    listener = UserFactory()
    with live_transport.subscribe(user_id=listener.pk) as pubsub:
        assert publish.inbox_deliver(entry=_entry(), user_ids=[listener.pk], now_ms=1, held_only=True) == 0
        deadline, event = time.monotonic() + 2, None
        while event is None and time.monotonic() < deadline:
            event = live_transport.decode_event(pubsub.get_message(timeout=0.2))
    assert event == {"v": 1, "reason": "deliver"}
    assert redis.exists(mc_keys.inbox(listener.pk), mc_keys.inbox_arrivals(listener.pk)) == 0


def test_the_script_refuses_keys_that_do_not_fit_the_stride(redis: Any) -> None:
    entry = _entry(expire_ms=0)
    # Without the expiry zset a recipient takes 6 keys: 7 (with it) do not fit.
    args = [entry.member, entry.ref, MONTH, entry.score, 0, 1, 6, "", "", 0, 200, "0"]
    with pytest.raises(ResponseError, match="do not fit the stride"):
        DELIVER_SCRIPT(mc_keys.deliver_keys([1]), args)
    args[6] = 9  # no such layout
    with pytest.raises(ResponseError, match="do not fit the stride"):
        DELIVER_SCRIPT(mc_keys.deliver_keys([1], expiry=False), args)
    assert redis.exists(mc_keys.inbox(1)) == 0


# --- chunks under eager Celery ---------------------------------------------------------


def test_eager_chunks_push_the_message_at_hand(operator: Any, clock: Any, settings: Any) -> None:
    settings.MESSAGECENTER_FANOUT_CHUNK = 2
    users = [UserFactory() for _ in range(5)]
    with CaptureQueriesContext(connection) as queries:
        sent = services.message_send(
            sender=operator, category="system", title="t", body_html="<p>b</p>", user_ids=[u.pk for u in users]
        )
    selects = [q["sql"] for q in queries.captured_queries if q["sql"].lstrip().startswith("SELECT")]
    # No reload of the message per chunk (a chunk task's first query), no
    # lookup of done chunks on a first run: besides the recipients' check,
    # the one read is the progress read after all chunks were pushed.
    assert not [s for s in selects if 'FROM "messagecenter_message"' in s]
    chunk_selects = [s for s in selects if "messagecenter_fanoutchunk" in s]
    assert len(chunk_selects) == 1
    assert "COUNT(*)" in chunk_selects[0]
    # One stream of deliver.lua calls for the three chunks, one commit for their rows.
    assert sum(1 for q in queries.captured_queries if q["sql"] == "COMMIT") <= 2
    message = Message.objects.get(pk=sent.pk)
    assert message.status == MessageStatus.DELIVERED
    assert sorted(FanoutChunk.objects.filter(message=message).values_list("index", "size")) == [(0, 2), (1, 2), (2, 1)]
    assert all(inbox.inbox_counts(user_id=u.pk, now_ms=0).unread_by_category["system"] == 1 for u in users)


def test_a_rerun_pushes_only_the_chunks_not_done(operator: Any, clock: Any, settings: Any, redis: Any) -> None:
    settings.MESSAGECENTER_FANOUT_CHUNK = 2
    users = [UserFactory() for _ in range(5)]
    message = send(operator, to={"users": users})
    FanoutChunk.objects.filter(message=message, index=1).delete()
    Message.objects.filter(pk=message.pk).update(status=MessageStatus.DELIVERING)
    pushed: list[list[int]] = []
    real = messages.inbox_deliver

    def record(**kwargs: Any) -> int:
        pushed.append(list(kwargs["user_ids"]))
        return real(**kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(messages, "inbox_deliver", record)
        services.message_deliver(message=Message.objects.get(pk=message.pk))
    assert pushed == [[users[2].pk, users[3].pk]]
    message.refresh_from_db()
    assert message.status == MessageStatus.DELIVERED
    assert FanoutChunk.objects.filter(message=message).count() == 3


def test_a_redis_error_sends_every_chunk_to_its_task(
    operator: Any, clock: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.MESSAGECENTER_FANOUT_CHUNK = 2
    users = [UserFactory() for _ in range(5)]
    real = messages.inbox_deliver
    failures = [1]  # the eager push of all chunks fails once

    def flaky(**kwargs: Any) -> int:
        if failures[0]:
            failures[0] -= 1
            raise RedisConnectionError("Redis went away")
        return real(**kwargs)

    delayed: list[tuple[int, int]] = []
    real_apply_async = tasks.message_fanout_chunk_task.apply_async

    def apply_async(args: list[int], **options: Any) -> Any:
        message_id, index = args  # exactly the two ids
        delayed.append((message_id, index))
        return real_apply_async(args=args, **options)

    monkeypatch.setattr(messages, "inbox_deliver", flaky)
    monkeypatch.setattr(tasks.message_fanout_chunk_task, "apply_async", apply_async)
    message = send(operator, to={"users": users})
    assert delayed == [(message.pk, 0), (message.pk, 1), (message.pk, 2)]
    assert message.status == MessageStatus.DELIVERED
    assert sorted(FanoutChunk.objects.filter(message=message).values_list("index", "size")) == [(0, 2), (1, 2), (2, 1)]
    assert all(inbox.inbox_counts(user_id=u.pk, now_ms=0).unread_by_category["system"] == 1 for u in users)


def test_a_retraction_committed_during_the_eager_push_still_wins(
    operator: Any, clock: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.MESSAGECENTER_FANOUT_CHUNK = 2
    users = [UserFactory() for _ in range(5)]
    real = messages.inbox_deliver
    pushed: list[list[int]] = []
    created: list[int] = []
    real_create = Message.objects.create

    def create(**kwargs: Any) -> Message:
        row = real_create(**kwargs)
        created.append(row.pk)
        return row

    def retract_before_the_write(**kwargs: Any) -> int:
        pushed.append(list(kwargs["user_ids"]))
        # Committed elsewhere, its removal done, before our write lands.
        Message.objects.filter(pk=created[0]).update(status=MessageStatus.RETRACTED)
        message = Message.objects.get(pk=created[0])
        messages._remove_everywhere(message)
        return real(**kwargs)

    monkeypatch.setattr(Message.objects, "create", create)
    monkeypatch.setattr(messages, "inbox_deliver", retract_before_the_write)
    message = send(operator, to={"users": users})
    assert pushed == [[u.pk for u in users]]  # all chunks in one push
    assert message.status == MessageStatus.RETRACTED
    # The progress read after the write saw the retraction and removed the item again.
    assert all(inbox.inbox_counts(user_id=u.pk, now_ms=0).unread_by_category["system"] == 0 for u in users)
    assert FanoutChunk.objects.filter(message=message).count() == 3


# --- a chunk's bookkeeping ------------------------------------------------------------------


def test_the_chunk_sql_names_the_models_tables_and_columns() -> None:
    chunk, msg = FanoutChunk._meta, Message._meta
    insert, progress = messages._CHUNK_INSERT_SQL, messages._CHUNK_PROGRESS_SQL
    assert f"INSERT INTO {chunk.db_table} " in insert
    # These names are concrete fields (get_field() may also answer a reverse relation).
    columns = [chunk.get_field(name).column for name in ("message", "index", "size", "done_at")]  # type: ignore[union-attr]
    assert f'({columns[0]}, "{columns[1]}", {columns[2]}, {columns[3]})' in insert
    # The conflict target is the unique constraint that keeps one row per chunk.
    unique = next(c for c in chunk.constraints if c.name == "mc_fanoutchunk_unique")
    # The constraint is a UniqueConstraint, and its names concrete fields.
    assert [chunk.get_field(f).column for f in unique.fields] == ["message_id", "index"]  # type: ignore[attr-defined, union-attr]
    assert 'ON CONFLICT (message_id, "index") DO NOTHING' in insert
    assert f"SELECT {msg.get_field('status').column}, " in progress
    assert f"FROM {chunk.db_table} WHERE {columns[0]} = %s" in progress
    assert f"FROM {msg.db_table} WHERE {msg.pk.column} = %s" in progress


def test_chunk_record_counts_its_own_row_once(operator: Any, clock: Any, settings: Any) -> None:
    settings.MESSAGECENTER_FANOUT_CHUNK = 2
    users = [UserFactory() for _ in range(3)]
    message = send(operator, to={"users": users})
    before = FanoutChunk.objects.get(message=message, index=0)
    assert messages._chunks_record(message=message, sizes=[(0, 2)]) == (MessageStatus.DELIVERED, 2)
    assert messages._chunks_record(message=message, sizes=[(0, 2), (5, 1), (6, 1)]) == (MessageStatus.DELIVERED, 4)
    again = FanoutChunk.objects.get(message=message, index=0)
    assert (again.pk, again.done_at, again.size) == (before.pk, before.done_at, 2)  # a rerun keeps the first row
    FanoutChunk.objects.filter(message=message).delete()
    Message.objects.filter(pk=message.pk).delete()
    # The message is gone: the foreign key refuses the row (or, deferred, nothing comes back).
    with pytest.raises((IntegrityError, Message.DoesNotExist)):
        messages._chunks_record(message=message, sizes=[(0, 2)])
