"""The outbox of read-model writes: order, idempotent replay, poison entries,
concurrent replays, and the marks that must not overtake pending ones."""

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from redis.exceptions import ConnectionError as RedisConnectionError

from durability import outbox
from durability.models import OutboxEntry
from durability.tasks import outbox_replay_task
from messagecenter import services as mc_services
from messagecenter.readmodel import inbox as inbox_readmodel
from notices import readmodel
from notices.services import announcement_mark_read, announcement_mark_unread
from tests.notices.conftest import announce

pytestmark = pytest.mark.django_db(transaction=True)


class Recorder:
    """A handler that remembers what it applied and can be told to fail."""

    def __init__(self) -> None:
        self.applied: list[Any] = []
        self.fail: dict[Any, Exception] = {}

    def __call__(self, payload: dict[str, Any], user_id: int | None) -> None:
        error = self.fail.get(payload["n"])
        if error is not None:
            raise error
        self.applied.append(payload["n"])


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    handler = Recorder()
    with mock.patch.object(outbox, "handlers", return_value={**outbox.handlers(), "test.record": handler}):
        outbox.forget_local_state()
        yield handler
    outbox.forget_local_state()


def _enqueue(*numbers: int, user_id: int | None = None) -> list[OutboxEntry]:
    return [outbox.enqueue(topic="test.record", payload={"n": n}, user_id=user_id) for n in numbers]


def test_enqueue_refuses_an_unknown_topic() -> None:
    with pytest.raises(ValueError, match="No outbox handler"):
        outbox.enqueue(topic="no.such.topic", payload={})
    assert not OutboxEntry.objects.exists()


def test_every_contract_topic_has_a_handler() -> None:
    assert {
        "notices.platform_sync",
        "notices.read",
        "messagecenter.mirror",
        "inbox.stale",
    } <= set(outbox.handlers())


def test_replay_applies_in_id_order_and_deletes(recorder: Recorder) -> None:
    _enqueue(3, 1, 2)
    assert outbox.replay() == 3
    assert recorder.applied == [3, 1, 2]
    assert not OutboxEntry.objects.exists()
    assert outbox.replay() == 0


def test_replay_respects_the_limit(recorder: Recorder) -> None:
    _enqueue(*range(7))
    assert outbox.replay(limit=5) == 5
    assert recorder.applied == [0, 1, 2, 3, 4]
    assert outbox.replay(limit=5) == 2
    assert recorder.applied == list(range(7))


def test_replay_stops_at_the_first_redis_error(recorder: Recorder) -> None:
    _, second, third = _enqueue(1, 2, 3)
    recorder.fail[2] = RedisConnectionError("down")
    assert outbox.replay() == 1
    assert recorder.applied == [1]
    second.refresh_from_db()
    assert second.attempts == 1
    assert "down" in second.last_error
    assert list(OutboxEntry.objects.values_list("pk", flat=True)) == [second.pk, third.pk]
    # Redis is back: the rest follows, still in order.
    del recorder.fail[2]
    assert outbox.replay() == 2
    assert recorder.applied == [1, 2, 3]
    assert not OutboxEntry.objects.exists()


def test_a_poison_entry_does_not_block_the_rest(recorder: Recorder) -> None:
    poison, _, _ = _enqueue(1, 2, 3)
    recorder.fail[1] = ValueError("cannot apply")
    assert outbox.replay() == 2
    assert recorder.applied == [2, 3]
    poison.refresh_from_db()
    assert (poison.attempts, poison.last_error) == (1, "ValueError: cannot apply")
    assert outbox.pending_count() == 1
    for _ in range(outbox.POISON_ATTEMPTS - 1):
        assert outbox.replay() == 0
    poison.refresh_from_db()
    assert poison.attempts == outbox.POISON_ATTEMPTS
    assert poison.last_error.startswith(outbox.PARKED_PREFIX)
    # Parked: kept for an operator, skipped by later replays, not pending for reads.
    assert outbox.pending_count() == 0
    _enqueue(4)
    assert outbox.replay() == 1
    assert recorder.applied == [2, 3, 4]
    assert OutboxEntry.objects.filter(pk=poison.pk, attempts=outbox.POISON_ATTEMPTS).exists()


def test_pending_user_marks_are_the_users_own_in_order(
    recorder: Recorder, recipient: Any, other_recipient: Any
) -> None:
    mine = _enqueue(5, 6, user_id=recipient.pk)
    _enqueue(7, user_id=other_recipient.pk)
    _enqueue(8)
    outbox.enqueue(topic="notices.read", payload={"n": 9}, user_id=recipient.pk)
    pending = outbox.pending_user_marks(user_id=recipient.pk, topics=["test.record"])
    assert [entry.pk for entry in pending] == [entry.pk for entry in mine]
    assert [entry.payload["n"] for entry in pending] == [5, 6]


def test_the_celery_task_replays_and_beat_runs_it(recorder: Recorder) -> None:
    _enqueue(1, 2)
    assert outbox_replay_task.apply().get() == 2
    assert recorder.applied == [1, 2]
    entry = settings.CELERY_BEAT_SCHEDULE["core-outbox-replay"]
    assert entry == {"task": "core.outbox_replay", "schedule": settings.MESSAGECENTER_OUTBOX_REPLAY_SECONDS}
    assert settings.MESSAGECENTER_OUTBOX_REPLAY_SECONDS == 10


def test_a_replay_waits_while_another_holds_older_entries(recorder: Recorder) -> None:
    """Two replays never apply one entry at once, and the second does not jump ahead."""
    _enqueue(1, 2, 3)
    if not connection.features.has_select_for_update_skip_locked:
        # SQLite (the embedded default) has one writer at a time: replays are serial.
        assert outbox.replay() == 3
        assert recorder.applied == [1, 2, 3]
        return
    locked = threading.Event()
    release = threading.Event()

    def hold_the_first() -> None:
        try:
            with transaction.atomic():
                list(OutboxEntry.objects.order_by("id").select_for_update()[:1])
                locked.set()
                release.wait(10)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_the_first)
    holder.start()
    try:
        assert locked.wait(10)
        assert outbox.replay() == 0  # entries 2 and 3 must not overtake entry 1
        assert recorder.applied == []
    finally:
        release.set()
        holder.join()
    assert outbox.replay() == 3
    assert recorder.applied == [1, 2, 3]


# --- The real handlers ------------------------------------------------------------


def test_replaying_announcement_marks_twice_is_replaying_them_once(recipient: Any) -> None:
    a = announce(["user"], publish_at=timezone.now() - timedelta(hours=1))
    payload = {"announcement_id": a.pk, "platforms": ["user"], "read": True, "at_ms": 1}
    for _ in range(2):
        outbox.enqueue(topic="notices.read", payload=payload, user_id=recipient.pk)
        assert outbox.replay() == 1
        assert readmodel.read_bits(platform="user", announcement_id=a.pk, user_ids=[recipient.pk]) == [True]
        assert readmodel.read_counts(announcement_id=a.pk, platforms=["user"]) == {"user": 1}
        assert sum(readmodel.read_hours(announcement_id=a.pk, platforms=["user"]).values()) == 1


def test_a_mark_does_not_overtake_the_users_pending_marks(recipient: Any) -> None:
    a = announce(["user"], publish_at=timezone.now() - timedelta(hours=1))
    with mock.patch("notices.readmodel.get_redis", side_effect=RedisConnectionError("down")):
        assert announcement_mark_read(user=recipient, announcement_id=a.pk) is True
    assert OutboxEntry.objects.filter(user_id=recipient.pk).count() == 1
    # Redis is back before the beat job ran: the older "read" is applied first,
    # then this "unread" (the other order would leave it read).
    assert announcement_mark_unread(user=recipient, announcement_id=a.pk) is True
    assert not OutboxEntry.objects.exists()
    assert readmodel.read_bits(platform="user", announcement_id=a.pk, user_ids=[recipient.pk]) == [False]


def test_a_mark_queues_behind_pending_marks_that_cannot_be_replayed(recipient: Any) -> None:
    a = announce(["user"], publish_at=timezone.now() - timedelta(hours=1))
    with mock.patch("notices.readmodel.get_redis", side_effect=RedisConnectionError("down")):
        announcement_mark_read(user=recipient, announcement_id=a.pk)
    with mock.patch("durability.outbox.replay", return_value=0):  # another replay holds them
        assert announcement_mark_unread(user=recipient, announcement_id=a.pk) is True
    reads = [e.payload["read"] for e in outbox.pending_user_marks(user_id=recipient.pk, topics=["notices.read"])]
    assert reads == [True, False]
    assert outbox.replay() == 2
    assert readmodel.read_bits(platform="user", announcement_id=a.pk, user_ids=[recipient.pk]) == [False]


def test_an_announcement_mark_whose_process_died_after_its_commit_reaches_redis(
    recipient: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mark's Redis half is an entry committed with its rows: a process
    that dies right after the commit (no after-commit callback runs) leaves
    it for the replay, while Redis kept its data and still says unread."""
    a = announce(["user"], publish_at=timezone.now() - timedelta(hours=1))
    dropped: list[Any] = []
    with monkeypatch.context() as dying:
        dying.setattr(transaction, "on_commit", lambda func, *_a, **_k: dropped.append(func))
        assert announcement_mark_read(user=recipient, announcement_id=a.pk) is True
    assert dropped
    assert readmodel.read_bits(platform="user", announcement_id=a.pk, user_ids=[recipient.pk]) == [False]
    assert outbox.replay() == 1
    assert readmodel.read_bits(platform="user", announcement_id=a.pk, user_ids=[recipient.pk]) == [True]
    # A mark whose request lives applies its own entry at once.
    assert announcement_mark_unread(user=recipient, announcement_id=a.pk) is True
    assert not OutboxEntry.objects.exists()
    assert readmodel.read_bits(platform="user", announcement_id=a.pk, user_ids=[recipient.pk]) == [False]


def test_a_failed_inbox_mirror_is_recorded_and_replayed(recipient: Any) -> None:
    with mock.patch("messagecenter.readmodel.publish.bulletin_put", side_effect=RedisConnectionError("down")):
        bulletin = mc_services.bulletin_create(title="kept", body_html="<p>b</p>", display_time=timezone.now())
    entry = OutboxEntry.objects.get()
    assert (entry.topic, entry.payload) == ("messagecenter.mirror", {"name": "bulletin", "args": [bulletin.pk, False]})
    assert outbox.replay() == 1
    page = inbox_readmodel.inbox_get(
        user_id=recipient.pk, ref=f"b{bulletin.pk}", now_ms=readmodel.to_ms(timezone.now())
    )
    assert page is not None
