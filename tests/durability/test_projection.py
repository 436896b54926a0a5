"""durability.projection: one run per projection and key per transaction, after
commit; facts of the last request; savepoints rolled back never run; a run
Redis refuses goes to the outbox under the projection's topic."""

from collections.abc import Iterator, Mapping
from typing import Any
from unittest import mock

import pytest
from django.db import transaction
from redis.exceptions import ConnectionError as RedisConnectionError

from durability import outbox, projection
from durability.models import OutboxEntry
from messagecenter.models import UserGroup

pytestmark = pytest.mark.django_db(transaction=True)

NAME = "test.projection"
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
