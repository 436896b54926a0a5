"""LuaScript.stream: many calls on one connection, replies read at the end;
NOSCRIPT calls run again once the script is loaded, other error replies are
raised after every reply was read (the connection stays usable)."""

from pathlib import Path
from typing import Any

import pytest
from redis.connection import Connection
from redis.exceptions import ResponseError

from core.lua import LuaScript, Packed, pack_evalsha, pack_filled
from live import keys as live_keys
from messagecenter import keys as mc_keys
from tests.fixtures.readmodel import script_cache_flush

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
    script_cache_flush(redis)
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


# --- packed calls (a fan-out's key lists go straight into the protocol) ----------------


@pytest.mark.parametrize("ids", [[7], [9, 10, 99_999, 100_000, 3], []], ids=["one", "mixed digits", "none"])
@pytest.mark.parametrize("notifications", [False, True])
@pytest.mark.parametrize("expiry", [False, True])
def test_packed_keys_are_the_packed_names(ids: list[int], notifications: bool, expiry: bool) -> None:

    templates = mc_keys.deliver_key_templates(notifications=notifications, expiry=expiry)
    names = mc_keys.deliver_keys(ids, notifications=notifications, expiry=expiry)
    packed = pack_filled(templates, ids)
    args = ["m1|system|202611|3", 5, "", "é"]
    channels = live_keys.user_channels(ids)
    # The same bytes as redis-py's own packer gives for the plain strings, keys and arguments alike.
    expected = b"".join(Connection().pack_command("EVALSHA", "f" * 40, len(names), *names, *args, *channels))
    assert packed.count == len(names)
    assert pack_evalsha("f" * 40, packed, [*args, pack_filled([live_keys.user_channel_template()], ids)]) == expected
    assert pack_evalsha("f" * 40, names, [*args, *channels]) == expected


def test_packed_calls_survive_a_flushed_script_cache(incr_script: LuaScript, redis: Any) -> None:
    templates = ["test:stream:{u\x01}:n"]
    assert incr_script.stream([(pack_filled(templates, [5]), [1])]) == [1]
    script_cache_flush(redis)
    calls: list[tuple[Any, list[Any]]] = [
        (pack_filled(templates, [5]), [1]),
        (["test:stream:{u6}:n"], [Packed(1, b"$2\r\n10\r\n")]),
    ]
    assert incr_script.stream(calls) == [2, 10]
    assert int(redis.get("test:stream:{u5}:n")) == 2


def test_packing_without_hiredis_gives_the_same_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    from core import lua

    args = ["EVALSHA", "f" * 40, 2, "k:{u1}", "ü", 7, 1.5, b"raw"]
    expected = b"".join(Connection().pack_command(*args))
    assert lua.pack_evalsha("f" * 40, ["k:{u1}", "ü"], args[5:]) == expected
    monkeypatch.setattr(lua, "HIREDIS_AVAILABLE", False)
    assert lua.pack_evalsha("f" * 40, ["k:{u1}", "ü"], args[5:]) == expected


def test_constants_reach_the_script_as_lua_values(tmp_path: Path, redis: Any) -> None:
    """Data a Python module defines once arrives in the script as locals, any text intact."""
    (tmp_path / "echo.lua").write_text("return {NAME, LIST[1], LIST[2], #LIST}", encoding="utf-8")
    odd = 'quote " back \\ line\nend'
    script = LuaScript(str(tmp_path / "anchor.py"), "echo.lua", constants={"NAME": odd, "LIST": ["a", "b|c"]})
    assert script(["k"], []) == [odd.encode(), b"a", b"b|c", 2]
