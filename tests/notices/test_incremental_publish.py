"""A new announcement is added to the platform indexes without a rebuild
(readmodel.platform_add): the result must equal what the full
platform_sync builds, a concurrent rebuild must never lose against it, and a
Redis failure after commit must still reach the outbox."""

import random
from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
from django.db import connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from redis.exceptions import ConnectionError as RedisConnectionError

from core.local_cache import local_caches_clear
from core.redis import is_cluster
from durability.models import OutboxEntry
from notices import keys as notice_keys
from notices import readmodel
from notices.models import Announcement
from notices.services import announcement_delete, announcement_update
from tests.conftest import round_trips
from tests.factories import UserFactory
from tests.notices.conftest import HOUR, T0, announce

pytestmark = pytest.mark.django_db(transaction=True)

PLATFORMS = ("user", "customer", "operator")


def indexes() -> dict[str, Any]:
    return {platform: readmodel.drift_chunk_indexes(platform=platform) for platform in PLATFORMS}


def rebuilt() -> dict[str, Any]:
    for platform in PLATFORMS:
        readmodel.platform_sync(platform=platform)
    return indexes()


def test_a_publish_adds_without_reading_postgresql_again(redis: Any) -> None:
    announce(["user"])  # the first build of the platform: a full rebuild
    with mock.patch.object(readmodel, "_platform_entries", side_effect=AssertionError("re-read")):
        second = announce(["user"], expire_at=T0 + HOUR)
    assert readmodel.drift_chunk_indexes(platform="user")[0][0][second.pk] == readmodel.to_ms(T0)
    assert readmodel.drift_chunk_indexes(platform="user")[0][1] == {second.pk: readmodel.to_ms(T0 + HOUR)}


def test_a_publish_costs_seven_statements_and_three_round_trips(redis: Any) -> None:
    announce(["user"])  # the platform's index exists from here on, as in steady state
    with CaptureQueriesContext(connection) as queries, round_trips() as trips, transaction.atomic():
        announce(["user"], title="Second")
    statements = [q["sql"] for q in queries.captured_queries]
    # BEGIN, the announcement, its platform row, the projection's record, the
    # webhook endpoints that take the event, COMMIT, the record's DELETE
    # once the projection ran; nothing read back.
    assert len(statements) <= 7, statements
    # The one read is the webhook endpoints lookup: nothing written is read back.
    reads = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    assert len(reads) == 1
    assert "core_webhookendpoint" in reads[0], statements
    if not is_cluster():  # RoundTrips counts the pool of a single Redis
        # The revision and the chunk set (one pipeline), then the chunk's
        # script; then the platform's live broadcast (live.transport.broadcast).
        assert trips[0] <= 3


@override_settings(MESSAGECENTER_NOTICE_CHUNK_USERS=4)
def test_a_publish_reaches_every_chunk_in_the_same_round_trips(redis: Any) -> None:
    """However many chunks the platform's readers make (users up to 10^9 make
    thousands at full size), the chunks' calls go out together."""
    for user_id in (2, 9, 13, 21, 30):  # chunks 0, 2, 3, 5 and 7
        UserFactory(id=user_id)
        readmodel.read_state(platform="user", user_id=user_id, now=T0)
    announce(["user"])  # the first build of the platform: a full rebuild
    announce(["user"], title="First add")  # the add's scripts are loaded from here on, as in steady state
    with round_trips() as trips:
        second = announce(["user"], title="Second")
    built = readmodel.drift_chunk_indexes(platform="user")
    assert sorted(built) == [0, 2, 3, 5, 7]
    for chunk in built.values():
        assert second.pk in chunk[0]
    assert indexes() == rebuilt()
    if not is_cluster():  # RoundTrips counts the pool of a single Redis
        assert trips[0] <= 3


@override_settings(MESSAGECENTER_NOTICE_CHUNK_USERS=4)
@pytest.mark.parametrize("seed", range(6))
def test_indexes_after_random_operations_equal_a_full_rebuild(seed: int, redis: Any) -> None:
    """Random creates (some expired, some scheduled, several platforms), edits,
    deletes and other processes (a cold revision cache) over several chunks:
    after every step the indexes are exactly what platform_sync builds."""
    rng = random.Random(seed)
    for user_id in (2, 9, 13):  # chunks 0, 2 and 3 exist
        UserFactory(id=user_id)
        readmodel.read_state(platform="user", user_id=user_id, now=T0)
    now = timezone.now()
    live: list[Announcement] = []
    for _ in range(25):
        roll = rng.random()
        if roll < 0.1:
            local_caches_clear()  # the next publish comes from another process
        if roll < 0.65 or not live:
            publish_at = rng.choice([T0, now - HOUR, now + HOUR, T0 - 3 * HOUR])
            expire_at = rng.choice([None, publish_at + HOUR, publish_at + 2 * HOUR])
            platforms = rng.sample(PLATFORMS, rng.randint(1, 3))
            live.append(announce(platforms, publish_at=publish_at, expire_at=expire_at))
        elif roll < 0.85:
            target = rng.choice(live)
            announcement_update(announcement=target, publish_at=target.publish_at - timedelta(minutes=5))
        else:
            target = live.pop(rng.randrange(len(live)))
            announcement_delete(announcement=target)
        assert indexes() == rebuilt()


def test_an_add_prunes_expired_entries_as_a_rebuild_does(redis: Any) -> None:
    now = timezone.now()
    # Expires after its own publish has surely run (a busy machine may take a
    # while), and before the add below, which runs "later".
    soon = announce(["user"], publish_at=now - HOUR, expire_at=now + timedelta(seconds=10))
    # A count after the expiry moves the chunk time past it (the read counters
    # then no longer count it): only then may an add drop the entry.
    readmodel.read_count(platform="user", user_id=1, now=now + timedelta(seconds=20))
    with mock.patch("notices.readmodel.timezone.now", return_value=now + timedelta(seconds=20)):
        later = readmodel.to_ms(now + HOUR)
        assert readmodel.platform_add(
            platform="user", entry=(soon.pk + 1000, later, None), seen=readmodel.revisions["user"]
        )
    assert set(readmodel.drift_chunk_indexes(platform="user")[0][0]) == {soon.pk + 1000}


def test_an_add_after_a_rebuild_started_rebuilds_instead(redis: Any) -> None:
    """The fence: a revision taken after the publisher's ref (a rebuild in
    flight, maybe holding a newer state of the row) makes the add refuse and
    the full rebuild run, which reads PostgreSQL."""
    first = announce(["user"])
    seen = readmodel.platform_revision_seen(platform="user")
    assert seen is not None
    # The row was edited and its rebuild took a revision (not written yet).
    Announcement.objects.filter(pk=first.pk).update(publish_at=T0 + HOUR)
    redis.incr(notice_keys.revision("user"))
    stale = (first.pk, readmodel.to_ms(T0), None)
    assert readmodel.platform_add(platform="user", entry=stale, seen=seen) is False
    assert readmodel.drift_chunk_indexes(platform="user")[0][0] == {first.pk: readmodel.to_ms(T0 + HOUR)}


def test_an_add_never_overwrites_a_rebuild_that_read_after_the_commit(redis: Any) -> None:
    first = announce(["user"])
    seen = readmodel.platform_revision_seen(platform="user")
    # Deleted (and rebuilt) between the commit and the add: the add must not bring it back.
    Announcement.objects.filter(pk=first.pk).delete()
    readmodel.platform_sync(platform="user", drop_ids=[first.pk])
    assert readmodel.platform_add(platform="user", entry=(first.pk, readmodel.to_ms(T0), None), seen=seen) is False
    assert readmodel.drift_chunk_indexes(platform="user")[0][0] == {}


def test_an_older_rebuild_in_flight_is_refused_after_an_add(redis: Any) -> None:
    announce(["user"])
    # A rebuild took its revision and read PostgreSQL before the next publish committed...
    old_rev = int(redis.incr(notice_keys.revision("user")))
    old_snapshot = readmodel._platform_entries("user")
    readmodel._write_chunk(redis, platform="user", chunk=0, rev=old_rev, entries=old_snapshot, drop_ids=())
    readmodel.revisions["user"] = old_rev
    second = announce(["user"])
    # ...and a slower rebuild of the same revision writes only now: refused.
    readmodel._write_chunk(redis, platform="user", chunk=0, rev=old_rev, entries=old_snapshot, drop_ids=())
    assert second.pk in readmodel.drift_chunk_indexes(platform="user")[0][0]
    assert indexes() == rebuilt()


def test_a_chunk_registered_but_not_built_makes_the_add_rebuild(redis: Any) -> None:
    announce(["user"])
    redis.sadd(notice_keys.chunks(), 7)  # a _build_chunk in flight: registered, not written yet
    second = announce(["user"])
    assert second.pk in readmodel.drift_chunk_indexes(platform="user")[7][0]
    assert indexes() == rebuilt()


def test_redis_failing_after_the_commit_goes_to_the_outbox(redis: Any) -> None:
    announce(["user"])
    with mock.patch.object(readmodel, "_add", side_effect=RedisConnectionError("down")):
        second = announce(["user"])
    entry = OutboxEntry.objects.get(topic="notices.platform_sync")
    assert entry.payload == {"platform": "user", "drop_ids": []}
    assert second.pk not in readmodel.drift_chunk_indexes(platform="user")[0][0]
    from durability import outbox

    assert outbox.replay() == 1
    assert second.pk in readmodel.drift_chunk_indexes(platform="user")[0][0]


def test_a_rolled_back_publish_adds_nothing(redis: Any) -> None:
    announce(["user"])
    before = indexes()

    class Boom(Exception):
        pass

    def publish_then_fail() -> None:
        with transaction.atomic():
            announce(["user", "customer"])
            raise Boom

    with pytest.raises(Boom):
        publish_then_fail()
    assert indexes() == before
