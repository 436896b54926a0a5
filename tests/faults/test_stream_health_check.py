"""LuaScript.stream on a connection that checks its health (production's
pools do, every 30 s): a PING sent while replies wait would read the first
of them as its own. On a private redis-server: fakeredis does not keep the
health check's clock as redis-py does."""

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as redis_py

from core.lua import LuaScript

pytestmark = pytest.mark.redis_server


def test_a_slow_producer_outlasting_the_health_check_stays_in_step(redis_server: Any, tmp_path: Path) -> None:
    """Calls come from a producer that pauses longer than the interval (a
    rebuild loading its next batch from PostgreSQL): the stream reads what
    waits before the health check can mistake it for the PING's reply."""
    (tmp_path / "incr.lua").write_text('return redis.call("INCRBY", KEYS[1], ARGV[1])', encoding="utf-8")
    script = LuaScript(str(tmp_path / "anchor.py"), "incr.lua")
    client = redis_py.Redis(host="127.0.0.1", port=redis_server.port, health_check_interval=1)

    def calls() -> Iterator[tuple[list[str], list[int]]]:
        yield ["slow"], [1]
        time.sleep(1.3)
        yield ["slow"], [2]
        yield ["slow"], [3]

    try:
        assert script.stream(calls(), client=client) == [1, 3, 6]
        assert client.ping()
    finally:
        client.close()
