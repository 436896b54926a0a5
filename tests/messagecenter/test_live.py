"""Live inbox: version counter and pub/sub events on every change, the
counts ETag (304 while nothing changed), and the server-sent event stream in
both flavours (blocking for WSGI, async for ASGI) on a real pub/sub."""

import asyncio
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any
from unittest.mock import patch

import pytest
from django.test import Client
from django.utils import timezone
from redis.exceptions import ConnectionError as RedisConnectionError

from live import transport as live_transport
from messagecenter import live, services
from messagecenter.live_api import InboxCountsLiveApi
from notices.services import announcement_create, announcement_mark_read
from tests.conftest import client_for, round_trips
from tests.messagecenter.conftest import make_group, send

pytestmark = pytest.mark.django_db(transaction=True)

COUNTS = "/api/v1/inbox/counts/"
STREAM = "/api/v1/inbox/stream/"

# On Redis Cluster the product turns pub/sub off by design (live.available()
# is False: pages poll the counts ETag instead), so events are never published.
PUBSUB_ONLY = pytest.mark.not_on_cluster(reason="live pub/sub events and streams are off on Redis Cluster by design")


def events(pubsub: Any, *, wait: float = 1.0) -> list[dict[str, Any]]:
    """Every event that arrives on the subscription within ``wait`` seconds of the last one."""
    found = []
    deadline = time.monotonic() + wait
    while (remaining := deadline - time.monotonic()) > 0:
        # None also stands for the (ignored) subscribe confirmation: keep waiting.
        event = live_transport.decode_event(pubsub.get_message(timeout=remaining))
        if event is not None:
            found.append(event)
            deadline = time.monotonic() + 0.2
    return found


def parse_frames(chunks: list[bytes]) -> list[tuple[str, dict[str, Any]]]:
    frames = []
    for block in b"".join(chunks).decode().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(":"))
        if "event" in lines:
            frames.append((lines["event"], json.loads(lines["data"])))
    return frames


@PUBSUB_ONLY
def test_every_inbox_change_bumps_the_version_and_publishes(operator: Any, recipient: Any) -> None:
    with live_transport.subscribe(user_id=recipient.pk) as pubsub:
        message = send(operator, to={"users": [recipient]})
        item_id = f"m{message.pk}"
        services.inbox_mark_read(user=recipient, item_id=item_id)
        services.inbox_mark_unread(user=recipient, item_id=item_id)
        services.inbox_mark_all_read(user=recipient)
        services.inbox_mark_seen(user=recipient)
        services.inbox_hide(user=recipient, item_id=item_id)
        got = events(pubsub)
    assert [e["reason"] for e in got] == ["deliver", "read", "unread", "read_all", "seen", "hide"]
    assert [e["v"] for e in got] == [1, 2, 3, 4, 5, 6]
    assert live_transport.user_version(user_id=recipient.pk) == 6


@PUBSUB_ONLY
def test_only_the_addressed_users_hear_of_a_delivery(operator: Any, recipient: Any, outsider: Any) -> None:
    group = make_group("team", recipient)
    with (
        live_transport.subscribe(user_id=recipient.pk) as mine,
        live_transport.subscribe(user_id=outsider.pk) as theirs,
    ):
        send(operator, to={"groups": [group]})
        assert [e["reason"] for e in events(mine)] == ["deliver"]
        assert events(theirs, wait=0.3) == []
    assert live_transport.user_version(user_id=outsider.pk) == 0


@PUBSUB_ONLY
def test_reading_an_announcement_is_an_inbox_change(operator: Any, recipient: Any) -> None:
    announcement = announcement_create(author=operator, title="A", body_html="<p>x</p>", platforms=["user"])
    with live_transport.subscribe(user_id=recipient.pk) as pubsub:
        announcement_mark_read(user=recipient, announcement_id=announcement.pk)
        announcement_mark_read(user=recipient, announcement_id=announcement.pk)  # no change, no event
        assert [e["reason"] for e in events(pubsub)] == ["announcement"]


def test_a_failing_publish_never_fails_the_write(
    operator: Any, recipient: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken:
        def __getattr__(self, name: str) -> Any:  # every command, script or pipeline
            raise RedisConnectionError("down")

    def settle_broken(*args: Any, **kwargs: Any) -> Any:
        raise RedisConnectionError("down")

    monkeypatch.setattr(live_transport, "get_redis", lambda: Broken())
    # A write that tells the pages in its own pipeline (one round trip) meets the failure there.
    monkeypatch.setattr(live_transport.SCRIPT, "settle", settle_broken)
    message = send(operator, to={"users": [recipient]})
    assert services.inbox_mark_read(user=recipient, item_id=f"m{message.pk}") is True
    assert "not published" in caplog.text
    monkeypatch.undo()
    body = client_for(recipient).get("/api/v1/inbox/").json()
    assert ids_of(body) == [f"m{message.pk}"]
    assert body["results"][0]["read"] is True


def ids_of(body: dict[str, Any]) -> list[str]:
    return [item["id"] for item in body["results"]]


# --- counts ETag ----------------------------------------------------------------------


def test_counts_answer_304_until_something_changes(operator: Any, recipient: Any) -> None:
    client = client_for(recipient)
    first = client.get(COUNTS)
    assert first.status_code == 200
    etag = first["ETag"]
    assert etag.startswith('W/"')
    assert first["Cache-Control"] == "private, no-cache"

    again = client.get(COUNTS, HTTP_IF_NONE_MATCH=etag)
    assert again.status_code == 304
    assert again["ETag"] == etag
    assert again.content == b""

    message = send(operator, to={"users": [recipient]})
    after_delivery = client.get(COUNTS, HTTP_IF_NONE_MATCH=etag)
    assert after_delivery.status_code == 200
    assert after_delivery.json()["unread"] == 1
    etag = after_delivery["ETag"]

    services.inbox_mark_read(user=recipient, item_id=f"m{message.pk}")
    after_read = client.get(COUNTS, HTTP_IF_NONE_MATCH=etag)
    assert after_read.status_code == 200
    assert after_read.json()["unread"] == 0


def test_changes_without_a_user_event_still_move_the_etag(operator: Any, recipient: Any, settings: Any) -> None:
    """Pull items (everyone), retractions and new announcements publish no per-user event."""
    client = client_for(recipient)
    etag = client.get(COUNTS)["ETag"]

    settings.MESSAGECENTER_PUSH_THRESHOLD = 0
    message = send(operator, to={"everyone": True})
    assert message.delivery == "pull"
    response = client.get(COUNTS, HTTP_IF_NONE_MATCH=etag)
    assert (response.status_code, response.json()["unread"]) == (200, 1)
    etag = response["ETag"]

    services.message_retract(message=message, actor=operator)
    response = client.get(COUNTS, HTTP_IF_NONE_MATCH=etag)
    assert (response.status_code, response.json()["unread"]) == (200, 0)
    etag = response["ETag"]

    announcement_create(author=operator, title="A", body_html="<p>x</p>", platforms=["user"])
    response = client.get(COUNTS, HTTP_IF_NONE_MATCH=etag)
    assert response.status_code == 200
    assert response.json()["by_category"]["announcement"] == 1


def test_etags_are_per_user(operator: Any, recipient: Any, other_recipient: Any) -> None:
    etag = client_for(recipient).get(COUNTS)["ETag"]
    assert client_for(other_recipient).get(COUNTS, HTTP_IF_NONE_MATCH=etag).status_code == 200


@contextmanager
def view_round_trips() -> Iterator[list[int]]:
    """The round trips the counts view itself makes (the request's own, for
    credentials and throttles, are not the view's)."""
    counted: list[int] = []
    get = InboxCountsLiveApi.get

    def counting(self: Any, request: Any) -> Any:
        with round_trips() as trips:
            response = get(self, request)
        counted.extend(trips)
        return response

    with patch.object(InboxCountsLiveApi, "get", counting):
        yield counted


@pytest.mark.not_on_cluster(reason="one round trip is a single-Redis feature (a cluster plans every read)")
def test_counts_and_their_etag_take_one_round_trip(operator: Any, recipient: Any, settings: Any) -> None:
    """The ETag is the answer's own: a poll (200 or 304) costs the counts' one
    round trip, and the tag moves exactly when the body does."""
    send(operator, to={"users": [recipient]})
    client = client_for(recipient)
    first = client.get(COUNTS)  # plans: the user's first read in this process
    with view_round_trips() as trips:
        again = client.get(COUNTS)
        not_modified = client.get(COUNTS, HTTP_IF_NONE_MATCH=first["ETag"])
    assert trips == [1, 1]
    assert (again.status_code, again.json(), again["ETag"]) == (200, first.json(), first["ETag"])
    assert (not_modified.status_code, not_modified["ETag"]) == (304, first["ETag"])
    assert first["ETag"] == live.counts_etag(user_id=recipient.pk, answer=first.json())


def test_counts_without_credentials_stay_401(anon_client: Any) -> None:
    assert anon_client.get(COUNTS, HTTP_IF_NONE_MATCH="*").status_code == 401


# --- the stream -----------------------------------------------------------------------


@PUBSUB_ONLY
def test_blocking_stream_forwards_events_and_ends_at_its_cap(operator: Any, recipient: Any, settings: Any) -> None:
    settings.MESSAGECENTER_LIVE_STREAM_SECONDS = 1.5
    settings.MESSAGECENTER_LIVE_HEARTBEAT_SECONDS = 0.2
    stream = live.inbox_event_stream(user_id=recipient.pk)
    opening = next(stream)  # subscribed from here on
    assert opening.startswith(b"retry: 3000\n\n")
    send(operator, to={"users": [recipient]})
    rest = list(stream)  # ends by itself at the cap
    frames = parse_frames([opening, *rest])
    assert frames[0] == ("hello", {"v": 0})
    assert ("inbox", {"v": 1, "reason": "deliver"}) in frames
    assert b": keepalive\n\n" in rest


@PUBSUB_ONLY
def test_async_stream_forwards_events(operator: Any, recipient: Any, settings: Any) -> None:
    settings.MESSAGECENTER_LIVE_STREAM_SECONDS = 5
    settings.MESSAGECENTER_LIVE_HEARTBEAT_SECONDS = 0.2

    async def collect() -> list[bytes]:
        stream = live.inbox_event_stream_async(user_id=recipient.pk)
        chunks = [await anext(stream)]
        # Publish from another thread while the loop waits on the subscription.
        await asyncio.to_thread(live_transport.inbox_changed, user_ids=[recipient.pk], reason="deliver")
        while not any(b"event: inbox" in c for c in chunks):
            chunks.append(await asyncio.wait_for(anext(stream), timeout=3))
        # The iterator is an async generator, which has aclose().
        await stream.aclose()  # type: ignore[attr-defined]
        return chunks

    frames = parse_frames(asyncio.run(collect()))
    assert frames == [("hello", {"v": 0}), ("inbox", {"v": 1, "reason": "deliver"})]


@PUBSUB_ONLY
def test_stream_endpoint_needs_a_session(recipient: Any, settings: Any) -> None:
    assert Client().get(STREAM).status_code == 401
    settings.MESSAGECENTER_LIVE_STREAM_SECONDS = 0.3
    settings.MESSAGECENTER_LIVE_HEARTBEAT_SECONDS = 0.1
    client = Client()
    client.force_login(recipient)
    response = client.get(STREAM)
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    assert response["Cache-Control"] == "no-cache"
    # The view streams: the test client's response type knows only HttpResponse.
    frames = parse_frames(list(response.streaming_content))  # type: ignore[attr-defined]
    assert frames[0] == ("hello", {"v": 0})


def test_stream_endpoint_sends_pages_to_polling_when_it_cannot_stream(
    recipient: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = Client()
    client.force_login(recipient)
    monkeypatch.setattr(live_transport, "available", lambda: False)
    assert client.get(STREAM).status_code == 204  # Redis Cluster: EventSource stops, the page polls
    monkeypatch.setattr(live_transport, "available", lambda: True)

    def down(*, user_id: int) -> int:
        raise RedisConnectionError("down")

    monkeypatch.setattr(live_transport, "user_version", down)
    assert client.get(STREAM).status_code == 503


def test_the_inbox_page_wires_up_live_updates(operator: Any, recipient: Any) -> None:
    for n in range(3):
        send(operator, to={"users": [recipient]}, title=f"n{n}")
    client = Client()
    client.force_login(recipient)
    first = client.get("/inbox/?limit=2").content.decode()
    assert 'data-stream-url="/api/v1/inbox/stream/"' in first
    # The list's script (inbox.js) re-reads the inbox API when the counts move.
    assert 'data-inbox-api="/api/v1/inbox/"' in first
    assert '<script src="/static/messagecenter/inbox.js" defer></script>' in first


def test_the_stream_is_in_the_openapi_document(operator: Any) -> None:
    schema = client_for(operator).get("/api/schema/?format=json").json()
    operation = schema["paths"]["/api/v1/inbox/stream/"]["get"]
    assert operation["operationId"] == "inbox_stream"
    ok = operation["responses"]["200"]["content"]
    assert list(ok) == ["text/event-stream"]
    example = next(iter(ok["text/event-stream"]["examples"].values()))["value"]
    assert parse_frames([example.encode()])[0] == ("hello", {"v": 7})
    # The event format is described: every kind a page hears.
    for reason in ("deliver", "pull", "bulletin", "remove", "announcement", "resync"):
        assert f"`{reason}`" in operation["description"] or f'"{reason}"' in operation["description"]
    assert {"204", "401", "503"} <= set(operation["responses"])


@PUBSUB_ONLY
def test_broadcasts_reach_the_blocking_stream_of_the_right_platform(
    operator: Any, recipient: Any, settings: Any
) -> None:
    """WSGI streams hear everyone's channel and their platforms' (a recipient is on "user")."""
    settings.MESSAGECENTER_LIVE_STREAM_SECONDS = 1.0
    settings.MESSAGECENTER_LIVE_HEARTBEAT_SECONDS = 0.2
    stream = live.inbox_event_stream(user_id=recipient.pk, platforms=["user"])
    opening = next(stream)
    live_transport.broadcast(scope="operator", reason="announcement")  # not the recipient's platform
    live_transport.broadcast(scope="user", reason="announcement", ref="a1")
    live_transport.broadcast(scope=live_transport.BROADCAST_EVERYONE, reason="pull", ref="m1")
    frames = parse_frames([opening, *stream])
    spread = live_transport.BROADCAST_SPREAD_MS
    assert frames[1:] == [
        ("inbox", {"reason": "announcement", "scope": "user", "spread": spread, "ref": "a1"}),
        ("inbox", {"reason": "pull", "scope": "everyone", "spread": spread, "ref": "m1"}),
    ]


@PUBSUB_ONLY
def test_a_broadcast_for_later_waits_until_due_and_goes_out_once(recipient: Any) -> None:
    now = int(time.time() * 1000)
    with live_transport.subscribe(user_id=recipient.pk, scopes=["everyone"]) as pubsub:
        live_transport.broadcast(scope="everyone", reason="bulletin", ref="b1", at_ms=now + 60_000)
        live_transport.broadcast(scope="everyone", reason="bulletin", ref="b2", at_ms=now + 60_000)
        live_transport.broadcast_cancel(scope="everyone", reason="bulletin", ref="b2")  # deleted before its time
        assert live_transport.due_publish(now_ms=now) == now + 60_000
        assert events(pubsub, wait=0.3) == []
        assert live_transport.due_publish(now_ms=now + 60_000) is None
        assert live_transport.due_publish(now_ms=now + 60_000) is None  # published once
        got = events(pubsub)
    assert [(e["reason"], e["ref"]) for e in got] == [("bulletin", "b1")]


@PUBSUB_ONLY
def test_a_message_to_everyone_is_told_once_by_its_registering_script(
    operator: Any, recipient: Any, settings: Any
) -> None:
    """The pull registration publishes the broadcast in its own call; a rerun of
    the delivery registers nothing and tells nobody again."""
    from messagecenter.models import Message, MessageStatus

    settings.MESSAGECENTER_PUSH_THRESHOLD = 0
    # Nothing publishes after the script: a broadcast of its own would fail here.
    with (
        patch.object(live_transport, "broadcast", side_effect=AssertionError("a broadcast round trip of its own")),
        live_transport.subscribe(user_id=recipient.pk, scopes=["everyone"]) as pubsub,
    ):
        message = send(operator, to={"everyone": True})
        Message.objects.filter(pk=message.pk).update(status=MessageStatus.QUEUED)
        services.message_deliver(message=Message.objects.get(pk=message.pk))  # a rerun
        got = events(pubsub)
    assert [(e["reason"], e.get("ref")) for e in got] == [("pull", message.ref)]
    assert Message.objects.get(pk=message.pk).status == MessageStatus.DELIVERED


@PUBSUB_ONLY
def test_a_scheduled_bulletin_edit_moves_its_one_event(recipient: Any) -> None:
    """Created for a minute ahead, then moved to two: pages hear of it once, at the new time."""
    now = timezone.now()
    bulletin = services.bulletin_create(title="B", body_html="<p>b</p>", display_time=now + timedelta(minutes=1))
    services.bulletin_update(bulletin=bulletin, data={"display_time": now + timedelta(minutes=2)})
    at_ms = int((now + timedelta(minutes=2)).timestamp() * 1000)
    with live_transport.subscribe(user_id=recipient.pk, scopes=["everyone"]) as pubsub:
        assert live_transport.due_publish(now_ms=at_ms - 60_000) == at_ms  # its old time: nothing due
        assert events(pubsub, wait=0.3) == []
        assert live_transport.due_publish(now_ms=at_ms) is None
        got = events(pubsub)
    assert [(e["reason"], e.get("ref")) for e in got] == [("bulletin", bulletin.ref)]


@PUBSUB_ONLY
def test_a_scheduled_announcement_is_told_to_its_platform_at_its_publish_time(operator: Any, recipient: Any) -> None:
    publish_at = timezone.now() + timedelta(minutes=5)
    announcement = announcement_create(
        author=operator, title="Later", body_html="<p>x</p>", platforms=["user"], publish_at=publish_at
    )
    at_ms = int(publish_at.timestamp() * 1000)
    with live_transport.subscribe(user_id=recipient.pk, scopes=["everyone", "user", "operator"]) as pubsub:
        assert live_transport.due_publish(now_ms=at_ms - 1) == at_ms
        assert events(pubsub, wait=0.3) == []
        assert live_transport.due_publish(now_ms=at_ms) is None
        got = events(pubsub)
    assert [(e["reason"], e["scope"], e.get("ref")) for e in got] == [("announcement", "user", f"a{announcement.pk}")]
