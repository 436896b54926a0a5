"""durability.projection: one run per projection and key per transaction, after
commit; facts of the last request; savepoints rolled back never run; a run
Redis refuses goes to the outbox under the projection's topic."""

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from redis.exceptions import ConnectionError as RedisConnectionError

from durability import drift, outbox, projection
from durability.drift import DriftCheck, Finding
from durability.models import OutboxEntry
from messagecenter.models import UserGroup

pytestmark = pytest.mark.django_db(transaction=True)

NAME = "test.projection"
DURABLE = "test.durable"
AREA = "test-area"
TOPIC = "test.projection_failed"


class Runs:
    def __init__(self) -> None:
        self.calls: list[tuple[list[Any], dict[Any, Any]]] = []
        self.fail = False

    def __call__(self, keys: list[Any], facts: Mapping[Any, Any]) -> None:
        if self.fail:
            raise RedisConnectionError("down")
        self.calls.append((list(keys), dict(facts)))


class Rollback(Exception):
    pass


class Area:
    """A drift area of the durable test projection: counts its checks and repairs."""

    def __init__(self) -> None:
        self.checked = 0
        self.repaired: list[list[Finding]] = []

    def find(self) -> list[Finding]:
        self.checked += 1
        return [] if self.repaired else [Finding(area=AREA, key="k", detail="lost")]

    def check(self) -> DriftCheck:
        return DriftCheck(AREA, "the test's area", self.find, lambda found: self.repaired.append(list(found)))


@pytest.fixture
def runs() -> Iterator[Runs]:
    recorded = Runs()
    test_projection = projection.Projection(
        runner=recorded, topic=TOPIC, payloads=lambda keys, facts: [{"keys": [list(k) for k in keys]}]
    )
    with (
        mock.patch.object(projection, "projections", return_value={**projection.projections(), NAME: test_projection}),
        mock.patch.object(outbox, "handlers", return_value={**outbox.handlers(), TOPIC: lambda payload, user_id: None}),
    ):
        yield recorded


@pytest.fixture
def durable(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Runs, Area]]:
    """A projection with a drift area (its requests recorded in their
    transactions) beside a plain one (``NAME``), and that area."""
    recorded, area = Runs(), Area()
    payloads = lambda keys, facts: [{"keys": [list(k) for k in keys]}]  # noqa: E731
    extra = {
        DURABLE: projection.Projection(runner=recorded, topic=TOPIC, payloads=payloads, area=AREA),
        NAME: projection.Projection(runner=Runs(), topic=TOPIC, payloads=payloads),
    }
    monkeypatch.setattr(drift, "drift_checks", lambda: {AREA: area.check()})
    with (
        mock.patch.object(projection, "projections", return_value={**projection.projections(), **extra}),
        mock.patch.object(outbox, "handlers", return_value={**outbox.handlers(), TOPIC: lambda payload, user_id: None}),
    ):
        yield recorded, area


@contextmanager
def dying(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """The block's transaction commits and its process dies before any
    after-commit callback runs: they are kept here, never called."""
    dropped: list[Any] = []
    with monkeypatch.context() as patched:
        patched.setattr(transaction, "on_commit", lambda func, *_a, **_k: dropped.append(func))
        yield dropped


def _later(monkeypatch: pytest.MonkeyPatch) -> None:
    later = timezone.now() + projection.UNRUN_GRACE + timedelta(seconds=1)
    monkeypatch.setattr(timezone, "now", lambda: later)


def _unrun() -> list[dict[str, Any]]:
    return list(OutboxEntry.objects.filter(topic=projection.UNRUN_TOPIC).values_list("payload", flat=True))


def test_outside_a_transaction_it_runs_at_once(runs: Runs) -> None:
    projection.project(NAME, [1, 2])
    assert runs.calls == [([1, 2], {})]


def test_requests_of_one_transaction_become_one_run_after_commit(runs: Runs) -> None:
    with transaction.atomic():
        projection.project(NAME, [1])
        projection.project(NAME, [2, 1])
        projection.project(NAME, [3])
        assert runs.calls == []
    assert runs.calls == [([1, 2, 3], {})]


def test_the_last_request_decides_about_facts(runs: Runs) -> None:
    with transaction.atomic():
        projection.project(NAME, [1])  # a receiver
        projection.project(NAME, [1, 2], facts={1: "known", 2: "known"})  # the service
        projection.project(NAME, [2])  # changed again: reload
    assert runs.calls == [([1, 2], {1: "known"})]


def test_a_rolled_back_transaction_runs_nothing_and_leaves_no_batch_behind(runs: Runs) -> None:
    def rolled_back() -> None:
        with transaction.atomic():
            projection.project(NAME, [1], facts={1: "stale"})
            raise Rollback

    with pytest.raises(Rollback):
        rolled_back()
    with transaction.atomic():
        projection.project(NAME, [2])
    assert runs.calls == [([2], {})]


def test_a_rolled_back_savepoint_runs_nothing_and_its_facts_are_not_used(runs: Runs) -> None:
    with transaction.atomic():
        projection.project(NAME, [1])
        try:
            with transaction.atomic():
                projection.project(NAME, [1, 2], facts={1: "rolled back"})
                UserGroup.objects.create(name="in the savepoint")
                raise Rollback
        except Rollback:
            pass
        projection.project(NAME, [3])
    assert runs.calls == [([1], {}), ([3], {})]
    assert not UserGroup.objects.exists()


def test_a_released_savepoint_coalesces_and_its_facts_give_way_to_a_reload(runs: Runs) -> None:
    with transaction.atomic():
        projection.project(NAME, [1])
        with transaction.atomic():
            projection.project(NAME, [1], facts={1: "kept"})
    # One run. The outer request runs first and cannot tell a released
    # savepoint from a rolled-back one, so it does not trust the facts given
    # inside: it reloads, which is always correct.
    assert runs.calls == [([1], {})]


def test_redis_failing_at_commit_records_the_topic_of_the_projection(runs: Runs) -> None:
    runs.fail = True
    with transaction.atomic():
        projection.project(NAME, [(1, "a")])
        projection.project(NAME, [(2, "b")])
    entry = OutboxEntry.objects.get()
    assert (entry.topic, entry.payload) == (TOPIC, {"keys": [[1, "a"], [2, "b"]]})


def test_an_unknown_projection_is_refused_at_once() -> None:
    with pytest.raises(ValueError, match="No projection registered"):
        projection.project("no.such.projection", [1])


# --- the record of a transaction's requests, for a process that dies after its commit ---


def test_a_durable_projection_is_recorded_in_its_transaction_and_the_record_goes_after_its_run(
    durable: tuple[Runs, Area],
) -> None:
    runs, _area = durable
    with transaction.atomic():
        projection.project(DURABLE, [1])
        projection.project(NAME, [9])
        projection.project(DURABLE, [1])
        assert _unrun() == [{"name": DURABLE, "keys": [1], "complete": True}]
    assert runs.calls == [([1], {})]
    assert _unrun() == []
    with transaction.atomic():
        projection.project(NAME, [9])
    assert _unrun() == []  # a projection without an area is not recorded


def _rolled_back(keys: list[Any]) -> None:
    try:
        with transaction.atomic():
            projection.project(DURABLE, keys)
            raise Rollback
    except Rollback:
        pass


def test_a_rolled_back_transaction_leaves_no_record(durable: tuple[Runs, Area]) -> None:
    _rolled_back([1])
    assert _unrun() == []
    assert durable[0].calls == []


def test_a_process_that_died_after_its_commit_has_its_keys_run_by_the_replay_after_the_grace(
    durable: tuple[Runs, Area], monkeypatch: pytest.MonkeyPatch
) -> None:
    runs, area = durable
    with dying(monkeypatch) as dropped, transaction.atomic():
        projection.project(DURABLE, [(1, "a")])
        projection.project(DURABLE, [(1, "a")])
    assert dropped
    assert runs.calls == []
    assert _unrun() == [{"name": DURABLE, "keys": [[1, "a"]], "complete": True}]
    assert outbox.replay() == 0  # within the grace its own process may still run it
    _later(monkeypatch)
    assert outbox.replay() == 1
    assert runs.calls == [([(1, "a")], {})]
    assert _unrun() == []
    assert area.checked == 0  # the record had every key: no check


def test_a_record_missing_keys_has_the_replay_check_and_mend_the_whole_area(
    durable: tuple[Runs, Area], monkeypatch: pytest.MonkeyPatch
) -> None:
    runs, area = durable
    with dying(monkeypatch), transaction.atomic():
        projection.project(DURABLE, [1])
        projection.project(NAME, [9])  # in between: the next request does not join the first
        projection.project(DURABLE, [2])
        projection.project(DURABLE, [1])
    assert _unrun() == [{"name": DURABLE, "keys": [1], "complete": False}]
    _later(monkeypatch)
    assert outbox.replay() == 1
    assert runs.calls == [([1], {})]
    assert area.checked == 2  # found, then checked again after the repair
    assert len(area.repaired) == 1
    assert _unrun() == []


def test_a_cascade_of_requests_writes_its_record_once_and_marks_it_once(durable: tuple[Runs, Area]) -> None:
    """A thousand rows deleted in a cascade ask a thousand times, each with a
    new key: the record is one INSERT and one UPDATE, not a row per signal."""
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        for key in range(1000):
            projection.project(DURABLE, [key])
        writes = [q["sql"] for q in queries.captured_queries if "core_outboxentry" in q["sql"]]
    assert [sql.split()[0] for sql in writes] == ["INSERT", "UPDATE"]
    assert durable[0].calls == [(list(range(1000)), {})]
    assert _unrun() == []


def test_a_run_redis_refuses_goes_to_its_topic_and_the_record_goes(durable: tuple[Runs, Area]) -> None:
    runs, _area = durable
    runs.fail = True
    with transaction.atomic():
        projection.project(DURABLE, [(3, "c")])
    assert list(OutboxEntry.objects.values_list("topic", "payload")) == [(TOPIC, {"keys": [[3, "c"]]})]


def test_a_savepoint_rolled_back_with_the_first_request_leaves_the_next_one_recorded(
    durable: tuple[Runs, Area], monkeypatch: pytest.MonkeyPatch
) -> None:
    with dying(monkeypatch), transaction.atomic():
        _rolled_back([1])
        projection.project(DURABLE, [2])
    assert _unrun() == [{"name": DURABLE, "keys": [2], "complete": True}]


def test_a_recorded_request_of_a_projection_without_an_area_keeps_every_key(
    durable: tuple[Runs, Area], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator's write to users' parts asks for a record though no area
    could mend a partial one: a later request adds its keys (an UPDATE), an
    unrecorded one (a user's own write, noted in the user's part) writes
    nothing, and the replay runs every recorded key."""
    _runs, area = durable
    plain = projection.projections()[NAME].runner
    assert isinstance(plain, Runs)
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        projection.project(NAME, [1])
    assert not [q for q in queries.captured_queries if "core_outboxentry" in q["sql"]]
    with dying(monkeypatch), transaction.atomic(), CaptureQueriesContext(connection) as queries:
        projection.project(NAME, [1, 2], recorded=True)
        projection.project(NAME, [2], recorded=True)  # nothing new: no write
        projection.project(NAME, [3])
        projection.project(NAME, [3, 4], recorded=True)
    writes = [q["sql"].split()[0] for q in queries.captured_queries if "core_outboxentry" in q["sql"]]
    assert writes == ["INSERT", "UPDATE"]
    [record] = _unrun()
    assert sorted(record["keys"]) == [1, 2, 3, 4]
    assert record["complete"] is True
    _later(monkeypatch)
    plain.calls.clear()
    assert outbox.replay() == 1
    assert [sorted(keys) for keys, _facts in plain.calls] == [[1, 2, 3, 4]]
    assert area.checked == 0
