"""core.tracking's held answers on a real redis-server of their own: what may
be held, what drops it (a change, a flush, a lost or silent connection), and
the round trips it costs. The counts built on it: tests/messagecenter/test_held_counts.py."""

import threading
import time
from typing import Any

import pytest

from core import tracking
from core.redis import get_redis
from core.tracking import HeldAnswers
from tests.faults.conftest import RedisServer

pytestmark = [pytest.mark.redis_server]

FOREVER = float("inf")


@pytest.fixture
def held(redis_server: RedisServer) -> Any:
    answers = HeldAnswers()
    yield answers
    answers.clear()


def _hold(held: HeldAnswers, name: str, *keys: str) -> None:
    """Read the keys through the tracking connection and hold an answer on them."""
    _, ticket = held.read([("GET", key) for key in keys])
    assert held.hold(name, f"answer {name}", keys=keys, until_ms=FOREVER, ticket=ticket)


def _round_trips(fn: Any) -> int:
    before = tracking.round_trips[0]
    fn()
    return tracking.round_trips[0] - before


def test_held_until_a_key_it_was_read_from_changes(held: HeldAnswers, redis_server: RedisServer) -> None:
    other = redis_server.client()  # another process's connection
    other.mset({"a": 1, "b": 2, "c": 3})
    _hold(held, "ab", "a", "b")
    _hold(held, "c", "c")
    assert held.get("ab", 0) == "answer ab"
    assert _round_trips(lambda: held.get("ab", 0)) == 0
    other.set("b", 20)
    assert held.news(timeout=1)
    assert held.get("ab", 0) is None
    assert held.get("c", 0) == "answer c"  # untouched
    # Read again, held again; and a key changed inside a script counts too.
    _hold(held, "ab", "a", "b")
    other.eval("redis.call('INCR', KEYS[1])", 1, "a")
    assert held.news(timeout=1)
    assert held.get("ab", 0) is None


def test_keys_a_script_read_are_tracked(held: HeldAnswers, redis_server: RedisServer) -> None:
    other = redis_server.client()
    other.set("inside", 1)
    _, ticket = held.read([("EVAL", "return redis.call('GET', KEYS[1])", 1, "inside")])
    assert held.hold("s", 1, keys=["inside"], until_ms=FOREVER, ticket=ticket)
    other.set("inside", 2)
    assert held.news(timeout=1)
    assert held.get("s", 0) is None


def test_a_change_between_the_replies_of_a_read_is_not_held(held: HeldAnswers, redis_server: RedisServer) -> None:
    """Another client changes what the round trip's first command read before
    its last one ran: the push arrives between the two replies, and an answer
    on that key must not be held. (The round trip's second command, a BLPOP,
    waits on the server until the other client has written.)"""
    other = redis_server.client()
    other.set("k", 1)

    def write_while_blocked() -> None:
        deadline = time.monotonic() + 5
        while not any(c.get("cmd") == "blpop" for c in other.client_list()):
            assert time.monotonic() < deadline
            time.sleep(0.005)
        other.set("k", 2)
        other.rpush("go", 1)

    writer = threading.Thread(target=write_while_blocked)
    writer.start()
    replies, ticket = held.read([("GET", "k"), ("BLPOP", "go", 5)])
    writer.join()
    assert replies[0] == b"1"
    assert not held.hold("k", 1, keys=["k"], until_ms=FOREVER, ticket=ticket)
    assert held.get("k", 0) is None
    # Keys the push did not name can still be held on that ticket.
    assert held.hold("other", 1, keys=["unrelated"], until_ms=FOREVER, ticket=ticket)


def test_a_round_trip_that_writes_what_it_read_is_dropped_before_served(held: HeldAnswers) -> None:
    """Redis sends the push about our own write after that command's reply: the
    answer may be held, but the next get takes the push in first."""
    get_redis().set("k", 1)
    _, ticket = held.read([("GET", "k"), ("EVAL", "return redis.call('INCR', KEYS[1])", 1, "k")])
    held.hold("k", 1, keys=["k"], until_ms=FOREVER, ticket=ticket)
    assert held.news(timeout=1)
    assert held.get("k", 0) is None


def test_a_push_taken_in_before_the_hold_refuses_it(held: HeldAnswers, redis_server: RedisServer) -> None:
    """Between ``read`` and ``hold`` another caller (a thread) took the push in."""
    other = redis_server.client()
    other.mset({"x": 1, "y": 1})
    _hold(held, "y", "y")
    _, ticket = held.read([("GET", "x")])
    other.set("x", 2)
    assert held.news(timeout=1)
    held.get("y", 0)  # takes the push about x in
    assert not held.hold("x", 1, keys=["x"], until_ms=FOREVER, ticket=ticket)


def test_time_ends_a_held_answer(held: HeldAnswers) -> None:
    _, ticket = held.read([("GET", "t")])
    assert held.hold("t", 1, keys=["t"], until_ms=1_000, ticket=ticket)
    assert held.get("t", 999) == 1
    assert held.get("t", 1_000) is None
    assert held.get("t", 999) is None  # dropped, not merely hidden


def test_a_flush_drops_everything(held: HeldAnswers, redis_server: RedisServer) -> None:
    _hold(held, "one", "p")
    _hold(held, "two", "q")
    redis_server.client().flushdb()
    assert held.news(timeout=1)
    assert held.get("one", 0) is None
    assert held.get("two", 0) is None


def test_after_this_process_sent_anything_the_next_get_waits_for_a_pong(held: HeldAnswers) -> None:
    """Redis may write the writer's reply before our push: after a send of
    ours the next get reads to a PONG first (one round trip), then none."""
    _hold(held, "w", "w")
    assert _round_trips(lambda: held.get("w", 0)) == 0
    get_redis().set("w", 5)  # this process's own write, through the pool
    assert _round_trips(lambda: held.get("w", 0)) == 1
    assert held.get("w", 0) is None
    _hold(held, "w", "w")
    get_redis().get("unrelated")  # a read counts as well: telling them apart is not worth the risk
    assert _round_trips(lambda: held.get("w", 0)) == 1
    assert held.get("w", 0) == "answer w"
    assert _round_trips(lambda: held.get("w", 0)) == 0


def test_a_lost_connection_drops_everything_and_the_next_read_reconnects(
    held: HeldAnswers, redis_server: RedisServer
) -> None:
    _hold(held, "z", "z")
    other = redis_server.client()
    killed = other.client_kill_filter(_type="normal", skipme=True)
    assert killed >= 1
    assert held.get("z", 0) is None
    _hold(held, "z", "z")  # a new connection, tracking again
    other.set("z", 1)
    assert held.news(timeout=1)
    assert held.get("z", 0) is None


def test_a_restarted_redis_forgets_nothing_it_should(held: HeldAnswers, redis_server: RedisServer) -> None:
    redis_server.client().set("r", 1)
    _hold(held, "r", "r")
    redis_server.stop()
    redis_server.start()
    redis_server.client().set("r", 2)  # the new server never tracked it: only the closed socket tells
    assert held.get("r", 0) is None
    _hold(held, "r", "r")
    assert held.get("r", 0) == "answer r"


def test_a_silent_redis_stops_held_answers_within_the_heartbeat(held: HeldAnswers, redis_server: RedisServer) -> None:
    """Frozen (a partition, a hung server): a write it accepted elsewhere could
    not be pushed, so held answers end once a PING goes unanswered."""
    _hold(held, "h", "h")
    redis_server.freeze()
    try:
        deadline = time.monotonic() + tracking.HEARTBEAT_SECONDS + 0.5 + 1.0  # heartbeat, socket timeout, slack
        while held.get("h", 0) is not None:
            assert time.monotonic() < deadline, "a held answer outlived a silent Redis"
            time.sleep(0.05)
    finally:
        redis_server.thaw()
    _hold(held, "h", "h")  # and it recovers
    assert held.get("h", 0) == "answer h"


def test_a_silent_but_alive_redis_keeps_answering(held: HeldAnswers) -> None:
    """The heartbeat's PONG comes back: nothing is dropped on a quiet connection."""
    _hold(held, "q", "q")
    deadline = time.monotonic() + tracking.HEARTBEAT_SECONDS * 2.5
    while time.monotonic() < deadline:
        assert held.get("q", 0) == "answer q"
        time.sleep(0.05)


def test_a_bounded_number_of_answers(redis_server: RedisServer) -> None:
    held = HeldAnswers(max_answers=3)
    try:
        for name in "abc":
            _hold(held, name, name)
        _hold(held, "d", "d")  # past the bound: the others go
        assert [held.get(name, 0) for name in "abcd"] == [None, None, None, "answer d"]
    finally:
        held.clear()


def test_thousands_of_pushes_queued_before_a_reply_are_taken_in(held: HeldAnswers, redis_server: RedisServer) -> None:
    """A burst of writes to keys this process read queues one invalidation per
    key ahead of the next reply: every one is taken in before the reply (the
    parser alone handled them one call deeper each, past the stack's limit)."""
    names = [f"burst:{i}" for i in range(5000)]
    other = redis_server.client()
    other.mset(dict.fromkeys(names, 1))
    _hold(held, "burst", *names)
    pipe = other.pipeline(transaction=False)
    for name in names:
        pipe.set(name, 2)  # one command, one push, per key
    pipe.execute()
    time.sleep(0.2)  # let the pushes reach the tracking connection's socket
    other.set("after", 3)
    replies, _ = held.read([("GET", "after")])
    assert replies == [b"3"]
    assert held.get("burst", 0) is None
