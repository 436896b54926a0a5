"""core.redis.round_trip_async on a private redis-server: replies raw and in
order, an error reply raised once every reply was read, and one deadline for
the whole round trip (the event loop's connections have no socket timeout of
their own). A server that stops answering costs a caller that deadline, a
redis-py TimeoutError (what the fast route and its callers catch), and a
connection that is dropped: replies that arrive later never answer the next
round trip."""

import asyncio
import time
from typing import Any

import pytest
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from core.redis import round_trip_async
from tests.faults.conftest import RedisServer

pytestmark = pytest.mark.not_on_cluster(reason="round_trip_async is single-Redis only by design")

DEADLINE = 0.4


async def _in_order() -> tuple[list[Any], type[BaseException] | None, list[Any]]:
    replies = await round_trip_async([("SET", "rt:a", "1"), ("INCR", "rt:a"), ("MGET", "rt:a", "rt:none"), ("PING",)])
    raised: type[BaseException] | None = None
    try:
        await round_trip_async([("INCR", "rt:n"), ("HGET", "rt:a", "x"), ("INCR", "rt:n")])
    except ResponseError as exc:  # HGET on a string: WRONGTYPE
        raised = type(exc)
    after = await round_trip_async([("GET", "rt:n"), ("GET", "rt:a")])
    return replies, raised, after


@pytest.mark.redis_server
def test_replies_come_back_raw_in_order_and_an_error_after_all_of_them(redis_server: RedisServer) -> None:
    replies, raised, after = asyncio.run(_in_order())
    assert replies == [b"OK", 2, [b"2", None], b"PONG"]
    assert raised is ResponseError
    # Every command of the failed round trip ran, and the connection stayed in step.
    assert after == [b"2", b"2"]


async def _hung(server: RedisServer) -> tuple[float, BaseException | None, list[Any]]:
    await round_trip_async([("SET", "rt:k", "before")])  # a pooled connection, ready
    server.freeze()
    started = time.monotonic()
    failure: BaseException | None = None
    try:
        # The test's own limit: a round trip without a deadline fails here instead of hanging.
        await asyncio.wait_for(round_trip_async([("SET", "rt:k", "during"), ("GET", "rt:k")]), DEADLINE + 5)
    except BaseException as exc:  # the test looks at whatever came out
        failure = exc
    waited = time.monotonic() - started
    server.thaw()
    # The frozen server now runs the two commands and answers them on the
    # dropped connection; this round trip must get its own replies.
    after = await round_trip_async([("GET", "rt:k"), ("ECHO", "mine")])
    return waited, failure, after


@pytest.mark.redis_server
def test_a_hung_server_costs_one_deadline_and_leaves_no_reply_behind(redis_server: RedisServer, settings: Any) -> None:
    settings.REDIS_SOCKET_TIMEOUT = DEADLINE
    waited, failure, after = asyncio.run(_hung(redis_server))
    assert isinstance(failure, RedisTimeoutError), failure
    assert DEADLINE <= waited < DEADLINE + 2.0
    assert after == [b"during", b"mine"]
