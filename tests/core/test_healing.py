"""core.healing and core.journal on the suite's Redis (a real one, or the embedded
fakeredis): the generation marker, the rebuild registry and lock, a stale
replica, the marks journal and its compaction. The faults themselves (a
private redis-server flushed or restarted) are in tests/faults/test_self_healing.py."""

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db.models import F
from django.test import override_settings
from django.utils import timezone

from core import activity, healing, journal, keys, outbox, rebuild
from core.apis import health_status
from core.models import MarkJournal, ReadModelState
from core.progress import SILENT
from core.redis import get_redis, keyspace_flush
from core.snapshots import drain_dirty
from messagecenter import services as mc_services
from messagecenter.models import Message
from messagecenter.selectors import inbox_list
from messagecenter.services.snapshots import inbox_read_snapshot
from notices.snapshots import announcement_read_snapshot

pytestmark = pytest.mark.django_db


@pytest.fixture
def healing_on() -> Iterator[None]:
    healing.forget()
    outbox.forget_local_state()
    try:
        with override_settings(MESSAGECENTER_SELF_HEALING=True, MESSAGECENTER_HEALING_CHECK_SECONDS=1.0):
            yield
            thread = healing.healer_thread()
            if thread is not None:
                thread.join(30)
    finally:
        healing.forget()
        outbox.forget_local_state()


def _message(operator: Any, recipient: Any) -> str:
    sent = mc_services.message_send(
        sender=operator, category="system", title="t", body_html="<p>b</p>", user_ids=[recipient.pk]
    )
    return str(Message.objects.get(pk=sent.pk).ref)


def test_apps_register_their_rebuild_steps_in_order() -> None:
    assert rebuild.registered_steps()[:2] == ["notices", "messagecenter"]


def test_off_means_ready_without_a_look_at_redis() -> None:
    get_redis().delete(keys.readmodel_generation())
    assert healing.check(fresh=True) is True
    assert health_status()[0] == {"status": "ok", "database": "ok", "redis": "ok"}


def test_a_flushed_redis_is_rebuilt_by_the_process_that_notices(
    healing_on: None, operator: Any, recipient: Any
) -> None:
    ref = _message(operator, recipient)
    first = rebuild.rebuild()
    assert first is not None
    assert first.generation == 1
    assert inbox_list(user=recipient).degraded is False
    mc_services.inbox_mark_read(user=recipient, item_id=ref)

    keyspace_flush()
    healing.forget()  # as after the check interval
    started = time.monotonic()
    page = inbox_list(user=recipient)  # notices, starts the healer, answers from PostgreSQL
    assert page.degraded is True
    assert [(item.id, item.read) for item in page.results] == [(ref, True)]  # the journal over the snapshot
    body, code = health_status()
    assert code == 200
    assert body["redis"] in ("rebuilding", "ok")
    thread = healing.healer_thread()
    assert thread is not None
    thread.join(30)
    assert time.monotonic() - started < 5
    assert healing.check(fresh=True) is True
    assert ReadModelState.objects.get().generation == 2
    assert int(get_redis().get(keys.readmodel_generation())) == 2
    page = inbox_list(user=recipient)
    assert page.degraded is False
    assert [(item.id, item.read) for item in page.results] == [(ref, True)]
    assert health_status()[0] == {"status": "ok", "database": "ok", "redis": "ok"}


def test_a_stale_replica_is_told_by_its_older_generation(healing_on: None, operator: Any, recipient: Any) -> None:
    _message(operator, recipient)
    rebuild.rebuild()
    keyspace_flush()
    rebuild.rebuild()  # generation 2 after a loss
    assert ReadModelState.objects.get().generation == 2
    get_redis().set(keys.readmodel_generation(), 1)  # what a replica synced before that loss holds
    healing.forget()
    with pytest.raises(healing.ReadModelNotReady):
        healing.require_ready()
    thread = healing.healer_thread()
    assert thread is not None
    thread.join(30)
    assert ReadModelState.objects.get().generation == 3
    assert healing.check(fresh=True) is True


def test_a_rebuild_of_an_intact_redis_keeps_its_generation(healing_on: None) -> None:
    assert rebuild.rebuild() is not None
    assert rebuild.rebuild() is not None  # by hand: runs, changes nothing anyone can see
    assert ReadModelState.objects.get().generation == 1
    assert rebuild.rebuild(wait=False, only_if_needed=True) is None  # the healer's: nothing to do


def test_marks_wait_in_the_outbox_while_the_read_model_is_not_ready(
    healing_on: None, operator: Any, recipient: Any
) -> None:
    ref = _message(operator, recipient)
    rebuild.rebuild()
    get_redis().delete(keys.readmodel_generation())
    healing.forget()
    healing._healer["next"] = time.monotonic() + 60  # no healer: the state stays "not ready"
    try:
        assert mc_services.inbox_mark_read(user=recipient, item_id=ref) is True
        assert mc_services.inbox_mark_all_read(user=recipient) == 0
        assert outbox.pending_count() == 2
        assert outbox.replay() == 0  # not into a Redis being rebuilt
        assert [(item.id, item.read) for item in inbox_list(user=recipient).results] == [(ref, True)]
        assert inbox_read_snapshot() == 0  # no copying of a Redis being rebuilt either
        assert announcement_read_snapshot() == 0
    finally:
        healing._healer["next"] = 0.0
    result = rebuild.rebuild()
    assert result is not None
    assert result.outbox == 2
    assert not outbox.pending_count()
    assert [(item.id, item.read) for item in inbox_list(user=recipient).results] == [(ref, True)]
    # Applied, and journaled until a snapshot holds them.
    assert MarkJournal.objects.filter(user_id=recipient.pk).count() == 2


def test_the_journal_buffers_and_flushes_in_a_thread(operator: Any, recipient: Any) -> None:
    with override_settings(MESSAGECENTER_JOURNAL_FLUSH_SECONDS=0.2):
        journal.record(topic="inbox.seen", payload={"at_ms": 1}, user_id=recipient.pk)
        assert journal.unflushed_count() == 1
        assert not MarkJournal.objects.exists()
        # Degraded reads see this process's unflushed marks too.
        assert [m.payload for m in outbox.user_marks(user_id=recipient.pk, topics=["inbox.seen"])] == [{"at_ms": 1}]
        deadline = time.monotonic() + 5
        while MarkJournal.objects.count() == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert journal.unflushed_count() == 0
        assert list(MarkJournal.objects.values_list("user_id", "topic", "payload")) == [
            (recipient.pk, "inbox.seen", {"at_ms": 1})
        ]
        journal.flush()


def test_user_marks_are_the_journal_then_the_pending_entries(recipient: Any, other_recipient: Any) -> None:
    now = timezone.now()
    MarkJournal.objects.create(topic="inbox.read", payload={"n": 2}, user_id=recipient.pk, marked_at=now)
    MarkJournal.objects.create(
        topic="inbox.read", payload={"n": 1}, user_id=recipient.pk, marked_at=now - timedelta(seconds=1)
    )
    MarkJournal.objects.create(topic="inbox.read", payload={"n": 0}, user_id=other_recipient.pk, marked_at=now)
    outbox.enqueue(topic="inbox.read", payload={"n": 3}, user_id=recipient.pk)
    outbox.enqueue(topic="notices.read", payload={"n": 4}, user_id=recipient.pk)
    marks = outbox.user_marks(user_id=recipient.pk, topics=["inbox.read"])
    assert [m.payload["n"] for m in marks] == [1, 2, 3]


def test_compaction_only_after_a_run_that_drained_everything(recipient: Any) -> None:
    before = journal.database_now()
    # The rows come later by more than a clock's rounding (SQLite's own clock
    # writes them, Python's floors ``before``).
    time.sleep(0.002)
    MarkJournal.objects.create(topic="inbox.read", payload={}, user_id=recipient.pk, marked_at=timezone.now())
    MarkJournal.objects.create(topic="notices.read", payload={}, user_id=recipient.pk, marked_at=timezone.now())
    assert journal.compact(topics=["inbox.read"], before=before) == 0  # written after the run started
    # SQLite's clock is floored to the millisecond: a run that starts in the
    # row's own millisecond leaves it (safely) for the next one.
    time.sleep(0.002)
    assert journal.compact(topics=["inbox.read"], before=journal.database_now()) == 1
    assert list(MarkJournal.objects.values_list("topic", flat=True)) == ["notices.read"]

    dirty = list(range(25))
    popped: list[int] = []

    def pop(count: int) -> list[int]:
        taken, dirty[:] = dirty[:count], dirty[count:]
        popped.extend(taken)
        return taken

    # Members added while it runs (SPOP takes them at random): up to twice the batches.
    common: dict[str, Any] = {
        "label": "x",
        "give_back": lambda members: None,
        "write": len,
        "batch": 10,
        "progress": SILENT,
    }
    assert drain_dirty(pending=20, pop=pop, **common) == (25, True)
    dirty[:] = list(range(100))
    assert drain_dirty(pending=20, pop=pop, **common) == (40, False)  # a stream it need not follow


def test_a_rebuild_by_another_process_makes_this_one_mark_users_active_again(healing_on: None, recipient: Any) -> None:
    rebuild.rebuild()
    assert healing.check(fresh=True) is True
    activity.forget_marked()
    assert activity.record_active(user_id=recipient.pk) is True
    assert activity.record_active(user_id=recipient.pk) is False  # marked today: no command

    # Another process noticed a loss and rebuilt between two looks of this
    # one: Redis holds a generation this process has not seen.
    keyspace_flush()
    ReadModelState.objects.filter(pk=1).update(generation=F("generation") + 1)
    get_redis().set(keys.readmodel_generation(), ReadModelState.objects.get(pk=1).generation)
    assert healing.check(fresh=True) is True
    assert activity.record_active(user_id=recipient.pk) is True  # the new Redis gets today's bit
    activity.forget_marked()
