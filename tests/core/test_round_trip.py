"""core.redis.round_trip: several plain commands in one write on one pooled
connection, a reply each; an error reply is raised once every reply was read,
so the connection goes back to the pool in step."""

from typing import Any

import pytest
from redis.exceptions import ResponseError

from core.redis import get_redis, round_trip
from tests.conftest import round_trips

pytestmark = pytest.mark.not_on_cluster(reason="round_trip is single-Redis only by design (one pooled connection)")


def test_replies_come_back_raw_and_in_order(redis: Any) -> None:
    redis.set("test:rt:a", "1")
    with round_trips() as trips:
        replies = round_trip(get_redis(), [("INCR", "test:rt:a"), ("MGET", "test:rt:a", "test:rt:none"), ("PING",)])
    assert replies == [2, [b"2", None], b"PONG"]
    assert trips == [1]


def test_a_transaction_reads_at_one_instant(redis: Any) -> None:
    redis.hset("test:rt:h", mapping={"x": "1", "y": "2"})
    replies = round_trip(get_redis(), [("MULTI",), ("HMGET", "test:rt:h", "x", "y"), ("GET", "test:rt:n"), ("EXEC",)])
    assert replies[-1] == [[b"1", b"2"], None]


def test_an_error_reply_is_raised_after_all_replies(redis: Any) -> None:
    redis.set("test:rt:text", "not a number")
    with pytest.raises(ResponseError):
        round_trip(get_redis(), [("INCR", "test:rt:n"), ("INCR", "test:rt:text"), ("INCR", "test:rt:n")])
    # Every command ran, and the connection the error came on is still in step.
    assert int(redis.get("test:rt:n")) == 2
    assert round_trip(get_redis(), [("GET", "test:rt:n")]) == [b"2"]
