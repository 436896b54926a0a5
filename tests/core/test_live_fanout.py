"""The loop's hub fans events out to its streams (``live.event_stream_async``)
on the run's real Redis, within one event loop: each stream is read as
Django's streaming response reads it (``anext``). A broadcast reaches every
stream, events that arrive together go out as one chunk, a stream whose
client stopped reading is dropped with a resync while the others go on, and
streams opening together share their version reads. (The same streams
under real servers: tests/core/test_live_servers.py.)
"""

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio

from core.redis import get_redis
from live import keys as live_keys
from live import transport as live

pytestmark = pytest.mark.not_on_cluster(reason="event streams are off on Redis Cluster by design (pages poll)")

FIRST_USER = 990_001


@pytest.fixture(autouse=True)
def _long_streams(settings: Any) -> None:
    # No cap and no heartbeat within a test: every chunk is events.
    settings.MESSAGECENTER_LIVE_STREAM_SECONDS = 60
    settings.MESSAGECENTER_LIVE_HEARTBEAT_SECONDS = 60


def _blocks(chunk: bytes) -> list[tuple[str, Any]]:
    found = []
    for block in chunk.decode().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in lines:
            found.append((lines["event"], json.loads(lines["data"])))
    return found


async def _open(user_id: int) -> tuple[AsyncIterator[bytes], list[tuple[str, Any]]]:
    stream = live.event_stream_async(user_id=user_id, event="inbox")
    return stream, _blocks(await anext(stream))


async def _next(stream: AsyncIterator[bytes]) -> list[tuple[str, Any]]:
    return _blocks(await asyncio.wait_for(anext(stream), 10))


async def _in_thread(function: Any, **kwargs: Any) -> None:
    await asyncio.to_thread(function, **kwargs)


async def _settle(check: Any, what: str) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def test_a_broadcast_reaches_every_stream_and_events_together_go_out_as_one_chunk() -> None:
    async def scenario() -> None:
        opened = [await _open(FIRST_USER + n) for n in range(20)]
        try:
            assert all(hello == [("hello", {"v": 0})] for _, hello in opened)
            await _in_thread(live.broadcast, scope=live.BROADCAST_EVERYONE, reason="bulletin", ref="b1")
            for stream, _ in opened:
                assert await _next(stream) == [
                    (
                        "inbox",
                        {"reason": "bulletin", "scope": "everyone", "spread": live.BROADCAST_SPREAD_MS, "ref": "b1"},
                    )
                ]
            # Three events while the first stream's reader is elsewhere: one chunk, in order.
            first = opened[0][0]
            for reason in ("read", "unread", "hide"):
                await _in_thread(live.inbox_changed, user_ids=[FIRST_USER], reason=reason)
            await _settle(lambda: live.hub().stream_count() == 20, "the streams to stay")
            await asyncio.sleep(0.3)  # the hub has queued all three
            assert await _next(first) == [
                ("inbox", {"v": 1, "reason": "read"}),
                ("inbox", {"v": 2, "reason": "unread"}),
                ("inbox", {"v": 3, "reason": "hide"}),
            ]
        finally:
            for stream, _ in opened:
                await stream.aclose()  # type: ignore[attr-defined]
            await live.hub_close()

    asyncio.run(scenario())


def test_a_stream_whose_client_stopped_reading_is_dropped_and_the_others_go_on() -> None:
    async def scenario() -> None:
        stuck, _ = await _open(FIRST_USER)
        reading, _ = await _open(FIRST_USER + 1)
        try:
            central = live.hub()
            channel = live_keys.user_channel(FIRST_USER)
            redis_client = get_redis()
            for n in range(live.STREAM_BACKLOG + 1):
                await asyncio.to_thread(redis_client.publish, channel, json.dumps({"v": n, "reason": "deliver"}))
            await _settle(lambda: central.stream_count() == 1, "the stuck stream to leave the hub")
            await _in_thread(live.broadcast, scope=live.BROADCAST_EVERYONE, reason="pull")
            assert [reason for _, data in await _next(reading) for reason in [data["reason"]]] == ["pull"]
            # What the stuck client reads next is one resync, and its stream is over.
            assert await _next(stuck) == [("inbox", {"reason": "resync", "spread": live.BROADCAST_SPREAD_MS})]
            with pytest.raises(StopAsyncIteration):
                await anext(stuck)
        finally:
            await reading.aclose()  # type: ignore[attr-defined]
            await stuck.aclose()  # type: ignore[attr-defined]
            await live.hub_close()

    asyncio.run(scenario())


def test_streams_opening_together_read_each_user_s_version_in_shared_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[int] = []
    real_mget = redis.asyncio.Redis.mget

    async def counted_mget(self: Any, keys: Any, *args: Any) -> Any:
        reads.append(len(keys))
        return await real_mget(self, keys, *args)

    monkeypatch.setattr(redis.asyncio.Redis, "mget", counted_mget)
    # Users 1 and 3 have versions of their own; the others none yet.
    live.inbox_changed(user_ids=[FIRST_USER + 1, FIRST_USER + 3], reason="deliver")
    live.inbox_changed(user_ids=[FIRST_USER + 3], reason="read")

    async def scenario() -> list[list[tuple[str, Any]]]:
        opened = await asyncio.gather(*(_open(FIRST_USER + n) for n in range(5)))
        for stream, _ in opened:
            await stream.aclose()  # type: ignore[attr-defined]
        await live.hub_close()
        return [hello for _, hello in opened]

    hellos = asyncio.run(scenario())
    assert hellos == [[("hello", {"v": v})] for v in (0, 1, 0, 2, 0)]
    # Read with MGET, in batches of the streams that opened together: never a GET per stream.
    assert sum(reads) == 5


def test_a_quiet_stream_gets_heartbeats_and_ends_at_its_cap(settings: Any) -> None:
    settings.MESSAGECENTER_LIVE_STREAM_SECONDS = 1.0
    settings.MESSAGECENTER_LIVE_HEARTBEAT_SECONDS = 0.2

    async def scenario() -> list[bytes]:
        stream = live.event_stream_async(user_id=FIRST_USER, event="inbox")
        try:
            # Ends by itself: the hub's tick marks it past its cap.
            return [chunk async for chunk in stream]
        finally:
            await live.hub_close()

    chunks = asyncio.run(asyncio.wait_for(scenario(), 10))
    assert _blocks(chunks[0]) == [("hello", {"v": 0})]
    assert len(chunks) >= 2  # hello and at least one keepalive over a second
    assert set(chunks[1:]) == {live.HEARTBEAT}
