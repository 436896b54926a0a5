"""LuaScript.stream: many calls on one connection, replies read at the end;
NOSCRIPT calls run again once the script is loaded, other error replies are
raised after every reply was read (the connection stays usable)."""

from pathlib import Path
from typing import Any

import pytest
from redis.exceptions import ResponseError

from core.lua import LuaScript

# stream() is the single-Redis lane (one pooled connection); a cluster client has no such pool.
pytestmark = pytest.mark.not_on_cluster(reason="LuaScript.stream is single-Redis only by design")


@pytest.fixture
def incr_script(tmp_path: Path) -> LuaScript:
    (tmp_path / "incr.lua").write_text('return redis.call("INCRBY", KEYS[1], ARGV[1])', encoding="utf-8")
    return LuaScript(str(tmp_path / "anchor.py"), "incr.lua")


def test_replies_come_back_in_order(incr_script: LuaScript, redis: Any) -> None:
    calls = (([f"test:stream:{i % 2}"], [i]) for i in range(1, 6))  # a generator: sent as built
    assert incr_script.stream(calls) == [1, 2, 4, 6, 9]
    assert incr_script.stream([]) == []


def test_a_flushed_script_cache_is_survived(incr_script: LuaScript, redis: Any) -> None:
    assert incr_script.stream([(["test:stream:a"], [1])]) == [1]
    redis.script_flush()
    # Every call came back NOSCRIPT (nothing ran): each runs again, once.
    assert incr_script.stream([(["test:stream:a"], [1]), (["test:stream:a"], [10])]) == [2, 12]
    assert int(redis.get("test:stream:a")) == 12


def test_an_error_reply_is_raised_after_all_replies(incr_script: LuaScript, redis: Any) -> None:
    redis.set("test:stream:text", "not a number")
    calls = [(["test:stream:n"], [1]), (["test:stream:text"], [1]), (["test:stream:n"], [1])]
    with pytest.raises(ResponseError):
        incr_script.stream(calls)
    # The calls around the failing one ran, and the pooled connection is in step.
    assert int(redis.get("test:stream:n")) == 2
    assert incr_script.stream([(["test:stream:n"], [5])]) == [7]
    assert redis.ping()
