"""Live for every kind, on a real uvicorn: one pub/sub connection per process
fans events out to all its streams.

``uvicorn config.asgi:application`` (two workers, the run's test database
and Redis, tests/core/test_asgi_connections.py's ``uvicorn_server``) holds 200
streams of 20 users open at once, signed in by token or by session. Every
stream hears, as an ``inbox`` event: a pushed message, a message to
everyone, a bulletin now and one scheduled for a moment later (only once it
is due), an announcement now and one scheduled for a moment later (only the
streams of its platform's users, only once due), a bulletin deleted before
its time (its removal, never the bulletin), a subscription notification and
a retraction. Meanwhile ``CLIENT LIST TYPE
pubsub`` shows one subscriber per worker and ``pg_stat_activity`` no more
of the server's PostgreSQL connections than its pools' minimum, none busy.
(tests/faults/test_live_redis_down.py: the same server without its Redis.)
"""

import asyncio
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connections
from django.test import Client
from django.utils import timezone
from redis import Redis

from core.redis import get_redis
from live import transport as live
from messagecenter import services
from notices.services import announcement_create
from tests.asgi_calls import sse_blocks
from tests.core.test_asgi_connections import POOL_MAX, WORKERS, Watcher, uvicorn_server
from tests.faults.test_redis_pool_bound import _children
from tests.fixtures.clients import token_for
from tests.messagecenter.conftest import make_group, send
from tests.served import ServedProcess, serving

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.not_on_cluster(reason="event streams are off on Redis Cluster by design (pages poll)"),
    pytest.mark.django_db(transaction=True),
]

USERS = 20
STREAMS_EACH = 10
STAFF = 2  # on the operator platform: they must not hear the user platform's announcement
STREAM = "/api/v1/inbox/stream/"


class Listener:
    """One open stream: every ``inbox`` event's data, with its arrival time."""

    def __init__(self, user_index: int) -> None:
        self.user_index = user_index
        self.events: list[tuple[float, dict[str, Any]]] = []
        self.hello = asyncio.Event()
        self.heartbeats = 0

    def reasons(self) -> list[str]:
        return [event["reason"] for _, event in self.events]

    async def run(self, client: httpx.AsyncClient, headers: dict[str, str], cookies: dict[str, str]) -> None:
        async with client.stream("GET", STREAM, headers=headers, cookies=cookies) as response:
            assert response.status_code == 200, await response.aread()
            assert response.headers["content-type"] == "text/event-stream"
            async for event, data in sse_blocks(response):
                if event == "keepalive":
                    self.heartbeats += 1
                elif event == "hello":
                    self.hello.set()
                elif event == "inbox":
                    self.events.append((time.time(), data))


def _people() -> list[tuple[Any, str, str]]:
    """(user, token, session id) per user; the first STAFF are staff (the operator platform)."""
    found = []
    for index in range(USERS):
        user = get_user_model().objects.create_user(
            username=f"live-{index}", password=f"pw-{index}-secret", is_staff=index < STAFF
        )
        browser = Client()
        browser.force_login(user)
        found.append((user, token_for(user), browser.cookies[settings.SESSION_COOKIE_NAME].value))
    return found


def _hub_subscribers(redis: Redis, workers: set[int]) -> list[dict[str, Any]]:
    """The pub/sub connections the server's workers hold (named after their pid)."""
    names = {f"{live.HUB_CLIENT_NAME}-{pid}" for pid in workers}
    return [c for c in redis.client_list(_type="pubsub") if c.get("name") in names]


async def _in_thread(function: Any, *args: Any, **kwargs: Any) -> Any:
    """A sync call (the services, the watcher) off the loop; its thread's connections closed after."""

    def call() -> Any:
        try:
            return function(*args, **kwargs)
        finally:
            connections.close_all()

    return await asyncio.to_thread(call)


async def _until(check: Any, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def test_every_kind_reaches_every_stream_through_one_subscriber_per_process(
    tmp_path: Path, operator: Any, settings: Any
) -> None:
    people = _people()
    group = make_group("everyone-here", *(user for user, _, _ in people))
    services.message_type_create(code="ops", name="Ops")
    services.subscription_create(message_type="ops", scope="site", group_id=group.pk)
    with serving(uvicorn_server(log=tmp_path / "uvicorn.log", application_name="mc-live-hub-test")) as server:
        asyncio.run(_scenario(server, people, operator, settings))


async def _scenario(server: ServedProcess, people: list[tuple[Any, str, str]], operator: Any, settings: Any) -> None:
    listeners = [Listener(i) for i in range(USERS) for _ in range(STREAMS_EACH)]
    limits = httpx.Limits(max_connections=len(listeners) + 10)
    watcher = Watcher("mc-live-hub-test")
    async with httpx.AsyncClient(base_url=server.url, timeout=60.0, limits=limits) as client:
        tasks = []
        for n, listener in enumerate(listeners):
            _, token, session_id = people[listener.user_index]
            # Half by token, half by the session cookie EventSource sends.
            headers = {"Authorization": f"Token {token}"} if n % 2 else {}
            cookies = {} if n % 2 else {settings.SESSION_COOKIE_NAME: session_id}
            tasks.append(asyncio.create_task(listener.run(client, headers, cookies)))
        try:
            await _until(lambda: all(listener.hello.is_set() for listener in listeners), "200 hellos", 60)
            await _checks(server, listeners, people, operator, settings, watcher)
        finally:
            watcher.conn.close()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def _checks(
    server: ServedProcess,
    listeners: list[Listener],
    people: list[tuple[Any, str, str]],
    operator: Any,
    settings: Any,
    watcher: Watcher,
) -> None:
    # One subscriber per process, whatever the number of streams and users.
    # (uvicorn's children: its workers, and multiprocessing's resource tracker.)
    workers = _children(server.process.pid)
    redis = get_redis()
    subscribers = _hub_subscribers(redis, workers)
    assert len(subscribers) == WORKERS, subscribers
    # Each worker subscribed the users whose streams it holds, plus the broadcast channels.
    assert sum(int(c["sub"]) for c in subscribers) >= USERS
    # No stream holds a PostgreSQL connection: 200 streams against pools of
    # POOL_MAX each, and what the pools keep is idle.
    states = await _in_thread(watcher.states)
    assert len(states) <= WORKERS * POOL_MAX, states
    assert all(state == "idle" for state in states), states

    users = [user for user, _, _ in people]

    def everyone_heard(reason: str, count: int = 1, among: list[Listener] = listeners) -> bool:
        return all(listener.reasons().count(reason) >= count for listener in among)

    message = await _in_thread(send, operator, to={"users": users})
    await _until(lambda: everyone_heard("deliver"), "a pushed message")

    settings.MESSAGECENTER_PUSH_THRESHOLD = 0
    everyone = await _in_thread(send, operator, to={"everyone": True}, title="All hands")
    assert everyone.delivery == "pull"
    await _until(lambda: everyone_heard("pull"), "a message to everyone")

    now = timezone.now()
    await _in_thread(services.bulletin_create, title="Now", body_html="<p>x</p>", display_time=now)
    await _until(lambda: everyone_heard("bulletin"), "a bulletin shown now")

    later = timezone.now() + timedelta(seconds=2)
    scheduled = await _in_thread(services.bulletin_create, title="Later", body_html="<p>y</p>", display_time=later)
    await asyncio.sleep(0.5)
    assert not any(event.get("ref") == scheduled.ref for listener in listeners for _, event in listener.events)
    await _until(lambda: everyone_heard("bulletin", 2), "a scheduled bulletin once due")
    arrivals = [at for listener in listeners for at, event in listener.events if event.get("ref") == scheduled.ref]
    assert len(arrivals) == len(listeners)
    assert min(arrivals) >= later.timestamp() - 0.05  # not before its display time

    plain = [listener for listener in listeners if listener.user_index >= STAFF]
    staff = [listener for listener in listeners if listener.user_index < STAFF]
    await _in_thread(announcement_create, author=operator, title="For users", body_html="<p>a</p>", platforms=["user"])
    await _until(lambda: everyone_heard("announcement", among=plain), "an announcement")

    # An announcement published a moment later reaches its platform's streams at its publish time.
    publish_at = timezone.now() + timedelta(seconds=2)
    pending = await _in_thread(
        announcement_create,
        author=operator,
        title="Later for users",
        body_html="<p>b</p>",
        platforms=["user"],
        publish_at=publish_at,
    )
    ref = f"a{pending.pk}"
    await asyncio.sleep(0.5)
    assert not any(event.get("ref") == ref for listener in listeners for _, event in listener.events)
    await _until(lambda: everyone_heard("announcement", 2, among=plain), "a scheduled announcement once due")
    arrivals = [at for listener in plain for at, event in listener.events if event.get("ref") == ref]
    assert len(arrivals) == len(plain)
    assert min(arrivals) >= publish_at.timestamp() - 0.05  # not before its publish time

    # A bulletin deleted before its display time: every stream hears the removal, never the bulletin.
    soon = timezone.now() + timedelta(seconds=1)
    dropped = await _in_thread(services.bulletin_create, title="Dropped", body_html="<p>z</p>", display_time=soon)
    await _in_thread(services.bulletin_delete, bulletin=dropped)
    await _until(lambda: everyone_heard("remove"), "a deleted bulletin's removal")
    # Due events go out in time order: once one due after it arrived, the dropped
    # bulletin's would have come first.
    marker = await _in_thread(
        services.bulletin_create, title="Marker", body_html="<p>m</p>", display_time=soon + timedelta(seconds=0.5)
    )
    await _until(lambda: everyone_heard("bulletin", 3), "a bulletin due after the dropped one")
    assert all(event.get("ref") != dropped.ref for listener in listeners for _, event in listener.events)
    assert all([event.get("ref") for _, event in listener.events].count(marker.ref) == 1 for listener in listeners)

    await _in_thread(services.notification_send, message_type="ops", scope="site", title="N", body_html="")
    await _until(lambda: everyone_heard("deliver", 2), "a subscription notification")

    await _in_thread(services.message_retract, message=message, actor=operator)
    await _until(lambda: everyone_heard("remove", 2), "a retraction")

    # The operator platform's streams heard everything but the user platform's announcement.
    assert not any("announcement" in listener.reasons() for listener in staff)
    # Still one subscriber per process.
    assert len(_hub_subscribers(redis, workers)) == WORKERS
