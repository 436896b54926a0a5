"""durability.healing on the suite's Redis (a real one, or the embedded
fakeredis): the generation marker, the rebuild registry and lock, a stale
replica. The faults themselves (a
private redis-server flushed or restarted) are in tests/faults/test_self_healing.py."""

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db.models import F
from django.test import override_settings

from core import keys
from core.redis import get_redis, keyspace_flush, prefix_drop
from durability import healing, outbox, rebuild
from durability.apis import health_status
from durability.keys import readmodel_generation
from durability.models import ReadModelState
from insight import activity
from messagecenter import services as mc_services
from messagecenter.models import Message
from messagecenter.selectors import inbox_list

pytestmark = pytest.mark.django_db(transaction=True)


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
    assert [step.name for step in rebuild.rebuild_steps()] == ["notices", "messagecenter"]


def test_off_means_ready_without_a_look_at_redis() -> None:
    get_redis().delete(readmodel_generation())
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
    assert [(item.id, item.read) for item in page.results] == [(ref, True)]  # committed before its answer
    body, code = health_status()
    assert code == 200
    assert body["redis"] in ("rebuilding", "ok")
    thread = healing.healer_thread()
    assert thread is not None
    thread.join(30)
    assert time.monotonic() - started < 5
    assert healing.check(fresh=True) is True
    assert ReadModelState.objects.get().generation == 2
    assert healing.marker() == 2
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
    get_redis().set(readmodel_generation(), healing.marker_value(1))  # what a replica synced before that loss holds
    healing.forget()
    with pytest.raises(healing.ReadModelNotReady):
        healing.require_ready()
    thread = healing.healer_thread()
    assert thread is not None
    thread.join(30)
    assert ReadModelState.objects.get().generation == 3
    assert healing.check(fresh=True) is True


def test_a_rebuild_over_a_copy_empties_what_is_ours_first(healing_on: None, operator: Any, recipient: Any) -> None:
    """A Redis holding an older copy (a marker of a generation PostgreSQL has moved
    past) is emptied under the key prefix before the steps add: a key no step
    writes is gone, another program's key in the same database is kept, and what
    PostgreSQL says comes back."""
    ref = _message(operator, recipient)
    rebuild.rebuild()
    ReadModelState.objects.filter(pk=1).update(generation=F("generation") + 1)  # a later rebuild, elsewhere
    redis = get_redis()
    stray, foreign = keys.key("left", "by", "the", "copy"), "another-program:key"
    redis.set(stray, 1)
    redis.set(foreign, 1)
    try:
        held, generation = healing.marker_read()
        assert held is not None
        assert generation != ReadModelState.objects.get().generation  # a copy: the rebuild empties it
        result = rebuild.rebuild()
        assert result is not None
        assert (result.steps["copy"] or {}).get("keys dropped", 0) > 2
        assert result.generation == 3
        assert redis.get(stray) is None
        assert redis.get(foreign) == b"1"
        assert healing.marker_read()[1] == ReadModelState.objects.get().generation
        assert [item.id for item in inbox_list(user=recipient).results] == [ref]
    finally:
        redis.delete(foreign)


def test_a_marker_holds_on_the_servers_it_was_written_on() -> None:
    assert healing.identity_kept("a", "a")
    assert healing.identity_kept("", "")  # INFO refused both times (fakeredis)
    assert not healing.identity_kept("a", "b")  # restarted, or a replica promoted
    assert not healing.identity_kept("", "a")  # a marker from before identities
    # A cluster: a primary added keeps it, one replaced or gone does not.
    assert healing.identity_kept("a,b,c", "a,b,c,d")
    assert not healing.identity_kept("a,b,c", "a,b,x")
    assert not healing.identity_kept("a,b,c", "a,b")


@pytest.mark.cluster
def test_on_a_real_cluster_the_marker_names_every_primary_and_a_copy_is_emptied(redis_cluster_url: str) -> None:
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    foreign = f"other-{uuid.uuid4().hex[:8]}"
    with override_settings(MESSAGECENTER_REDIS_CLUSTER_URL=redis_cluster_url, MESSAGECENTER_KEY_PREFIX=prefix):
        redis = get_redis()
        primaries = healing.server_identity().split(",")
        assert len(primaries) == 3
        assert all(primaries)
        # Written before a primary joined: still good, and from now on it names the newcomer too.
        redis.set(readmodel_generation(), f"5@{','.join(primaries[:2])}")
        assert healing.marker() == 5
        assert redis.get(readmodel_generation()).decode() == f"5@{','.join(sorted(primaries))}"
        # A primary it names is gone (failed over, restarted): a copy.
        redis.set(readmodel_generation(), f"5@{','.join([*primaries[:2], 'gone'])}")
        assert healing.marker() is None
        # Emptying a copy takes every key under the prefix, in every slot, and no other.
        ours = [keys.key("k", i, f"{{s{i}}}") for i in range(40)]
        for name in ours:
            redis.set(name, 1)
        redis.set(foreign, 1)
        try:
            assert prefix_drop() == len(ours) + 1  # and the marker
            assert not any(redis.exists(name) for name in ours)
            assert redis.get(foreign) == b"1"
        finally:
            redis.delete(foreign)


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
    get_redis().delete(readmodel_generation())
    healing.forget()
    healing._healer["next"] = time.monotonic() + 60  # no healer: the state stays "not ready"
    try:
        assert mc_services.inbox_mark_read(user=recipient, item_id=ref) is True
        assert mc_services.inbox_mark_all_read(user=recipient) == 0  # PostgreSQL has the mark already
        assert outbox.pending_count() == 1
        assert outbox.replay() == 0  # not into a Redis being rebuilt
        assert [(item.id, item.read) for item in inbox_list(user=recipient).results] == [(ref, True)]
    finally:
        healing._healer["next"] = 0.0
    result = rebuild.rebuild()
    assert result is not None
    assert result.outbox == 1
    assert not outbox.pending_count()
    assert [(item.id, item.read) for item in inbox_list(user=recipient).results] == [(ref, True)]


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
    get_redis().set(readmodel_generation(), healing.marker_value(ReadModelState.objects.get(pk=1).generation))
    assert healing.check(fresh=True) is True
    assert activity.record_active(user_id=recipient.pk) is True  # the new Redis gets today's bit
    activity.forget_marked()
