"""With Redis down: inbox calls answer from PostgreSQL, marks are accepted
(the user's part in Redis is recorded stale, dropped once Redis is back), committed writes are kept (the mirror waits in
the outbox, and the rebuild restores it)."""

from io import StringIO
from typing import Any

import pytest
import redis as redis_lib
from django.core.management import call_command
from django.test import Client
from redis.backoff import NoBackoff
from redis.retry import Retry

from durability import outbox
from durability.models import OutboxEntry
from messagecenter import services
from messagecenter.models import Bulletin
from messagecenter.readmodel import inbox as readmodel_inbox
from tests.conftest import assert_error, client_for
from tests.fixtures.readmodel import redis_refused

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def redis_down(monkeypatch: pytest.MonkeyPatch) -> Any:
    dead = redis_lib.Redis(
        host="127.0.0.1", port=1, socket_connect_timeout=0.2, socket_timeout=0.2, retry=Retry(NoBackoff(), 0)
    )
    import core.lua
    from messagecenter.readmodel import inbox, publish, scripts

    for module in (core.lua, scripts, inbox, publish):
        monkeypatch.setattr(module, "get_redis", lambda: dead)
    return monkeypatch


def test_inbox_marks_are_accepted_and_replayed(recipient: Any, clock: Any, redis_down: Any) -> None:
    redis_down.undo()  # the bulletin reaches Redis first
    bulletin = services.bulletin_create(title="kept", body_html="<p>b</p>", display_time=clock.now)
    ref = f"b{bulletin.pk}"
    client = client_for(recipient)
    assert [(i["id"], i["read"]) for i in client.get("/api/v1/inbox/").json()["results"]] == [(ref, False)]

    redis_refused(redis_down)
    response = client.post(f"/api/v1/inbox/{ref}/read/")
    assert (response.status_code, response.content) == (204, b"")
    # The mark is committed in PostgreSQL, the user's part recorded stale, and the mark shown at once.
    pending = OutboxEntry.objects.get(user_id=recipient.pk)
    assert (pending.topic, pending.payload, pending.attempts) == ("inbox.stale", {}, 0)
    listed = client.get("/api/v1/inbox/").json()
    assert [(i["id"], i["read"]) for i in listed["results"]] == [(ref, True)]
    assert listed["unread_count"] == 0
    assert_error(client.post("/api/v1/inbox/m999/read/"), 404, "not_found")
    assert client.post("/api/v1/inbox/read-all/").json() == {"marked": 0}
    response = client.post(f"/api/v1/inbox/{ref}/unread/")
    assert (response.status_code, response.content) == (204, b"")
    assert client.get("/api/v1/inbox/").json()["unread_count"] == 1
    assert client.post("/api/v1/inbox/read-all/").json() == {"marked": 1}
    response = client.post("/api/v1/inbox/seen/")
    assert (response.status_code, response.content) == (204, b"")
    assert client.get("/api/v1/inbox/counts/").json()["unseen"] == 0
    topics = list(OutboxEntry.objects.filter(user_id=recipient.pk).values_list("topic", flat=True))
    # One entry per write that missed Redis. (The first "read all" found
    # nothing unread: nothing to commit, nothing for Redis.)
    assert topics == ["inbox.stale"] * 4
    # Nothing reached Redis meanwhile: its copy of the item is still unread.
    redis_down.undo()
    now_ms = int(clock.now.timestamp() * 1000)
    row = readmodel_inbox.inbox_get(user_id=recipient.pk, ref=ref, now_ms=now_ms)
    assert row is not None
    assert row.read is False

    assert outbox.replay() == 4
    assert not OutboxEntry.objects.exists()
    # The stale part was dropped and (self-healing off here: no fill on read)
    # filled again at once from PostgreSQL, marks and all.
    row = readmodel_inbox.inbox_get(user_id=recipient.pk, ref=ref, now_ms=now_ms)
    assert row is not None
    assert row.read is True
    body = client.get("/api/v1/inbox/").json()
    assert [(i["id"], i["read"]) for i in body["results"]] == [(ref, True)]
    assert (body["unread_count"], body["unseen_count"]) == (0, 0)


def test_inbox_page_answers_from_postgresql(recipient: Any, operator: Any, clock: Any, redis_down: Any) -> None:
    redis_down.undo()  # the items reach Redis first
    from tests.messagecenter.conftest import send

    read = send(operator, to={"users": [recipient]}, title="already read")
    unread = send(operator, to={"users": [recipient]}, title="still unread")
    services.inbox_mark_read(user=recipient, item_id=read.ref)
    import core.lua
    from messagecenter.readmodel import inbox, publish, scripts

    dead = redis_lib.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    for module in (core.lua, scripts, inbox, publish):
        redis_down.setattr(module, "get_redis", lambda: dead)
    browser = Client()
    browser.force_login(recipient)
    response = browser.get("/inbox/")
    assert response.status_code == 200
    html = response.content.decode()
    # Both items, from PostgreSQL, with their read state, and the page says it is degraded.
    assert "already read" in html
    assert "still unread" in html
    assert "Live updates paused" in html
    assert response.context["counts"]["unread"] == 1
    flags = {item.id: item.read for item in response.context["page"].results}
    assert flags == {read.ref: True, unread.ref: False}
    assert response.context["page"].degraded


def test_committed_bulletin_survives_and_the_rebuild_restores_it(
    recipient: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import core.lua
    from messagecenter.readmodel import inbox, publish, scripts

    dead = redis_lib.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    real = {m: m.get_redis for m in (core.lua, scripts, inbox, publish)}
    for module in real:
        monkeypatch.setattr(module, "get_redis", lambda: dead)
    bulletin = services.bulletin_create(title="kept", body_html="", display_time=clock.now)  # no exception
    assert Bulletin.objects.filter(pk=bulletin.pk).exists()
    for module, original in real.items():
        monkeypatch.setattr(module, "get_redis", original)
    call_command("messagecenter_rebuild", "--warm", stdout=StringIO())
    assert [i["id"] for i in client_for(recipient).get("/api/v1/inbox/").json()["results"]] == [f"b{bulletin.pk}"]


def test_replayed_read_all_leaves_items_that_arrived_later_unread(
    recipient: Any, operator: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import timedelta

    import core.lua
    from messagecenter.readmodel import inbox, publish, scripts
    from tests.messagecenter.conftest import send

    first = send(operator, to={"users": [recipient]}, title="before the outage")
    client = client_for(recipient)
    assert client.get("/api/v1/inbox/counts/").json()["unread"] == 1

    dead = redis_lib.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    real = {m: m.get_redis for m in (core.lua, scripts, inbox, publish)}
    for module in real:
        monkeypatch.setattr(module, "get_redis", lambda: dead)
    clock.now += timedelta(minutes=1)
    assert client.post("/api/v1/inbox/read-all/").json() == {"marked": 1}
    for module, get in real.items():
        monkeypatch.setattr(module, "get_redis", get)

    # Redis is back, but the outbox has not been replayed yet when a new item lands.
    clock.now += timedelta(minutes=1)
    later = send(operator, to={"users": [recipient]}, title="after the mark")
    assert outbox.replay() >= 1
    flags = {i["id"]: i["read"] for i in client.get("/api/v1/inbox/").json()["results"]}
    assert flags == {first.ref: True, later.ref: False}
    assert client.get("/api/v1/inbox/counts/").json()["unread"] == 1


def test_entries_of_the_per_write_topics_become_stale_parts(recipient: Any) -> None:
    """An outbox left by an earlier version (one entry per mark's Redis half)
    is carried over by the migration: each user's entry now drops that user's
    part, and entries of other topics are left as they were."""
    import importlib

    from django.apps import apps

    old = ["inbox.read", "inbox.read_all", "inbox.seen", "inbox.hide", "inbox.group_end"]
    for topic in old:
        OutboxEntry.objects.create(topic=topic, payload={"ref": "m1", "at_ms": 1}, user_id=recipient.pk)
    mirror = OutboxEntry.objects.create(topic="messagecenter.mirror", payload={"name": "bulletin", "args": [1]})
    importlib.import_module("messagecenter.migrations.0021_outbox_stale_parts")._stale(apps, None)
    stale = OutboxEntry.objects.exclude(pk=mirror.pk)
    assert list(stale.values_list("topic", "payload", "user_id")) == [("inbox.stale", {}, recipient.pk)] * len(old)
    mirror.refresh_from_db()
    assert (mirror.topic, mirror.payload) == ("messagecenter.mirror", {"name": "bulletin", "args": [1]})
