"""The read model heals itself: a private redis-server loses its data (FLUSHALL,
a restart without persistence) while a client keeps working. The loss is
noticed within seconds, one rebuild restores Redis from PostgreSQL, reads stay
correct meanwhile (no false 404, "read all" works), /healthz says
"rebuilding" then "ok", and no acknowledged mark is lost (each is committed
to PostgreSQL before its answer)."""

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
from django.db import transaction
from django.utils import timezone

from core.breaker import reset_breakers
from durability import healing, outbox, rebuild
from durability.keys import readmodel_generation
from durability.models import OutboxEntry, ReadModelState
from messagecenter import services as mc_services
from messagecenter.models import Bulletin, Message
from messagecenter.selectors import inbox_list
from messagecenter.services import rebuild as messages_rebuild
from notices import readmodel
from notices.models import Announcement
from tests.conftest import client_for
from tests.faults.conftest import HEALED_WITHIN_SECONDS, RedisServer, wait_healer
from tests.notices.conftest import announce

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis_server]


def _world(operator: Any, recipient: Any) -> tuple[list[str], Announcement]:
    sent = [
        mc_services.message_send(
            sender=operator, category="system", title=f"m{i}", body_html="<p>m</p>", user_ids=[recipient.pk]
        )
        for i in range(3)
    ]
    bulletin = mc_services.bulletin_create(title="bulletin", body_html="<p>b</p>", display_time=timezone.now())
    announcement = announce(["user"], publish_at=timezone.now() - timedelta(hours=1))
    return [*(Message.objects.get(pk=m.pk).ref for m in sent), f"b{bulletin.pk}"], announcement


def _built() -> None:
    """What the first start of a deployment does (or the healer would on the first read)."""
    assert rebuild.rebuild() is not None


def _inbox(client: Any) -> dict[str, bool]:
    response = client.get("/api/v1/inbox/")
    assert response.status_code == 200, response.content[:300]
    return {item["id"]: item["read"] for item in response.json()["results"]}


def _from_redis(user: Any) -> dict[str, bool] | None:
    """The inbox as the selector answers it, or None when PostgreSQL answered."""
    page = inbox_list(user=user, limit=50)
    return None if page.degraded else {item.id: item.read for item in page.results}


def _flags(client: Any) -> dict[int, bool]:
    response = client.get("/api/v1/announcements/")
    assert response.status_code == 200
    return {int(item["id"]): item["read"] for item in response.json()["results"]}


def _marker(server: RedisServer) -> bytes | None:
    value: bytes | None = server.client().get(readmodel_generation())
    return value


def _with_step(step: Any) -> Any:
    """The apps' rebuild steps and this one after them."""
    steps = rebuild.rebuild_steps()
    return mock.patch.object(rebuild, "rebuild_steps", return_value=[*steps, step])


@pytest.fixture
def slow_rebuild() -> Iterator[None]:
    """A rebuild that lasts a second or so, as on a real install (a few rows take
    a fraction of that): long enough to be seen, and served around, while it runs."""

    def step(progress: Any) -> dict[str, int]:
        time.sleep(1.5)
        return {}

    with _with_step(rebuild.RebuildStep("test-slow", 999, step)):
        yield


@pytest.mark.usefixtures("slow_rebuild")
def test_flushall_is_noticed_and_rebuilt_while_reads_stay_right(
    healing_on: RedisServer, operator: Any, recipient: Any
) -> None:
    refs, announcement = _world(operator, recipient)
    _built()
    user = client_for(recipient)
    assert user.post(f"/api/v1/inbox/{refs[0]}/read/").status_code == 204
    assert user.post(f"/api/v1/announcements/{announcement.pk}/read/").status_code == 204
    expected = {ref: ref == refs[0] for ref in refs}
    assert _inbox(user) == expected
    assert user.get("/healthz").json() == {"status": "ok", "database": "ok", "redis": "ok"}
    generation = ReadModelState.objects.get().generation

    healing_on.client().flushall()
    flushed = time.monotonic()
    health: list[str] = []
    read_all_done = False
    detected_at = None
    while time.monotonic() - flushed < HEALED_WITHIN_SECONDS:
        # An item that exists is never a 404, and the page shows every item.
        for ref in refs:
            response = user.get(f"/api/v1/inbox/{ref}/")
            assert response.status_code == 200, (ref, response.status_code)
        assert user.get(f"/api/v1/announcements/{announcement.pk}/").status_code == 200
        assert _inbox(user) == expected
        assert _flags(user) == {announcement.pk: True}
        body = user.get("/healthz").json()
        assert body["status"] == "ok"
        health.append(body["redis"])
        if body["redis"] == "rebuilding":
            detected_at = detected_at or time.monotonic()
            assert set(body["rebuild"]) == {"started_at", "elapsed_seconds"}
            if not read_all_done:
                # "Read all" during the rebuild: answered from PostgreSQL, applied after it.
                response = user.post("/api/v1/inbox/read-all/")
                assert response.status_code == 200, response.content[:300]
                assert response.json() == {"marked": len(refs) - 1}
                expected = dict.fromkeys(refs, True)
                read_all_done = True
        if body["redis"] == "ok" and read_all_done:
            break
        time.sleep(0.1)
    healed = time.monotonic() - flushed
    assert health[-1] == "ok", health
    assert "rebuilding" in health
    assert read_all_done
    assert detected_at is not None
    assert detected_at - flushed < 2.5
    assert healed < HEALED_WITHIN_SECONDS
    # Served from Redis again, with what was done during the rebuild.
    assert _from_redis(recipient) == expected
    assert healing.marker() == generation + 1 == ReadModelState.objects.get().generation
    assert not OutboxEntry.objects.exists()
    assert readmodel.read_bits(platform="user", announcement_id=announcement.pk, user_ids=[recipient.pk]) == [True]


def test_a_change_committed_while_the_rebuild_reads_is_not_overwritten(
    healing_on: RedisServer, operator: Any, recipient: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message for everyone (the rebuild restores its detail) edited after
    the rebuild's step read it and before the step wrote it: the edit's
    projection waits in the outbox while the read model is not ready, and runs
    after the steps, so the older detail does not win."""
    sent = mc_services.message_send(
        sender=operator, category="system", title="before", body_html="<p>m</p>", everyone=True
    )
    ref = Message.objects.get(pk=sent.pk).ref
    _built()
    healing_on.client().flushall()
    monkeypatch.setattr(healing, "heal_soon", lambda: None)  # the test runs the rebuild itself
    assert not healing.check(fresh=True)
    read = messages_rebuild.details_of_messages

    def read_then_edit(messages: Any) -> dict[str, Any]:
        shown = read(messages)  # what the step writes: the title before the edit
        if any(m.pk == sent.pk for m in messages):
            with transaction.atomic():
                edited = Message.objects.get(pk=sent.pk)
                edited.title = "after"
                edited.save()
        return shown

    monkeypatch.setattr(messages_rebuild, "details_of_messages", read_then_edit)
    _built()
    assert healing.check(fresh=True)
    item = client_for(recipient).get(f"/api/v1/inbox/{ref}/")
    assert item.status_code == 200
    assert item.json()["title"] == "after"
    assert _from_redis(recipient) is not None  # answered from Redis, not PostgreSQL
    assert not OutboxEntry.objects.exists()


def test_marks_taken_during_an_outage_survive_an_empty_restart_and_a_later_flush(
    healing_on: RedisServer, operator: Any, recipient: Any
) -> None:
    refs, announcement = _world(operator, recipient)
    _built()
    user = client_for(recipient)
    assert _inbox(user) == dict.fromkeys(refs, False)

    healing_on.stop()  # a crash: no dump, the next server starts empty
    assert user.post(f"/api/v1/inbox/{refs[1]}/read/").status_code == 204
    assert user.post(f"/api/v1/announcements/{announcement.pk}/read/").status_code == 204
    assert user.post("/api/v1/inbox/seen/").status_code == 204
    assert OutboxEntry.objects.filter(user_id=recipient.pk).count() == 3
    expected = {ref: ref == refs[1] for ref in refs}
    assert _inbox(user) == expected

    healing_on.start()
    reset_breakers()  # what the cooldown does a few seconds later
    # Beat's replay must not pour the marks into an empty Redis (where the
    # rebuild would overwrite them and nothing would keep them).
    assert outbox.replay() == 0
    assert OutboxEntry.objects.filter(user_id=recipient.pk).count() == 3
    started = time.monotonic()
    while _marker(healing_on) is None and time.monotonic() - started < HEALED_WITHIN_SECONDS:
        assert _inbox(user) == expected  # from PostgreSQL meanwhile; the read notices the loss
        time.sleep(0.1)
    wait_healer()
    assert _marker(healing_on) is not None
    assert not OutboxEntry.objects.exists()
    assert _from_redis(recipient) == expected
    assert _flags(user) == {announcement.pk: True}
    counts = user.get("/api/v1/inbox/counts/").json()
    assert counts["unseen"] == 0

    # Lost again: PostgreSQL has had the marks since their answers.
    healing_on.client().flushall()
    healing.forget()  # this process's next read looks at the marker at once
    assert _inbox(user) == expected
    wait_healer()
    assert _marker(healing_on) is not None
    assert _from_redis(recipient) == expected
    assert _flags(user) == {announcement.pk: True}


def test_marks_made_just_before_a_flushall_survive(healing_on: RedisServer, operator: Any, recipient: Any) -> None:
    refs, announcement = _world(operator, recipient)
    _built()
    user = client_for(recipient)
    assert user.post(f"/api/v1/inbox/{refs[0]}/read/").status_code == 204
    assert user.post(f"/api/v1/announcements/{announcement.pk}/read/").status_code == 204
    assert user.post(f"/api/v1/inbox/{refs[2]}/read/").status_code == 204
    assert user.post(f"/api/v1/inbox/{refs[0]}/unread/").status_code == 204
    # The last answer a moment ago: nothing waits anywhere but PostgreSQL.
    healing_on.client().flushall()
    healing.forget()
    expected = {ref: ref == refs[2] for ref in refs}
    assert _inbox(user) == expected  # from PostgreSQL while the rebuild runs
    wait_healer()
    assert _marker(healing_on) is not None
    assert _from_redis(recipient) == expected
    assert _flags(user) == {announcement.pk: True}


def test_a_redis_back_from_an_older_snapshot_is_not_trusted(
    healing_on: RedisServer, operator: Any, recipient: Any
) -> None:
    """A Redis that comes back with a copy older than the writes answered since
    (a restart from its last dump, a failover to a replica that lagged) holds
    the same generation marker as before: it is told by the server that answers
    (another process), rebuilt (what users share is mended, deletions too) and
    every user is filled again, so no acknowledged write is missing."""
    refs, announcement = _world(operator, recipient)
    _built()
    user = client_for(recipient)
    assert _inbox(user) == dict.fromkeys(refs, False)
    assert _flags(user) == {announcement.pk: False}
    generation = ReadModelState.objects.get().generation
    healing_on.client().save()  # the snapshot the server comes back with

    # Answered after the snapshot: a mark, an announcement read, a bulletin deleted.
    assert user.post(f"/api/v1/inbox/{refs[0]}/read/").status_code == 204
    assert user.post(f"/api/v1/announcements/{announcement.pk}/read/").status_code == 204
    mc_services.bulletin_delete(bulletin=Bulletin.objects.get(pk=int(refs[3][1:])))
    expected = {ref: ref == refs[0] for ref in refs[:3]}
    assert _inbox(user) == expected

    healing_on.stop(keep_snapshot=True)
    healing_on.start()
    reset_breakers()
    assert _marker(healing_on) is not None  # the snapshot's marker: not a loss to the eye
    assert healing.marker() is None  # but written on the server that ran before
    healing.forget()  # as after the check interval
    assert _inbox(user) == expected  # from PostgreSQL while the rebuild runs
    wait_healer()
    assert ReadModelState.objects.get().generation == generation + 1
    assert _from_redis(recipient) == expected
    assert _flags(user) == {announcement.pk: True}
    assert not OutboxEntry.objects.exists()


def test_two_threads_that_notice_at_once_run_one_rebuild(healing_on: RedisServer, operator: Any) -> None:
    _world(operator, operator)
    _built()
    runs: list[float] = []

    def slow_step(progress: Any) -> dict[str, int]:
        runs.append(time.monotonic())
        time.sleep(0.5)  # long enough for the other thread to try the lock meanwhile
        return {}

    with _with_step(rebuild.RebuildStep("test-slow", 999, slow_step)):
        healing_on.client().flushall()
        results: list[Any] = []
        barrier = threading.Barrier(2)

        def notice() -> None:
            from django.db import connection

            try:
                barrier.wait()
                results.append(rebuild.rebuild(wait=False, only_if_needed=True))
            finally:
                connection.close()

        threads = [threading.Thread(target=notice) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert len(runs) == 1
    assert sorted(result is None for result in results) == [False, True]
    assert _marker(healing_on) is not None
    # A third one after it, as a process whose last look was before the rebuild: nothing to do.
    assert rebuild.rebuild(wait=False, only_if_needed=True) is None
