"""A dead or hung Redis costs a fraction of a second, then nothing, per call."""

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest
import redis as redis_py

from core import breaker
from core.breaker import BreakerConnection, reset_breakers

COOLDOWN = 0.6


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _client(port: int) -> redis_py.Redis:
    pool = redis_py.ConnectionPool(
        host="127.0.0.1",
        port=port,
        connection_class=BreakerConnection,
        breaker_cooldown=COOLDOWN,
        socket_connect_timeout=0.2,
        socket_timeout=0.2,
    )
    return redis_py.Redis(connection_pool=pool)


class BreakerClock:
    """core.breaker's clock, moved by the test only: a cooldown is over when
    the test says so, never while a slow machine runs the test's calls."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def breaker_clock(monkeypatch: pytest.MonkeyPatch) -> BreakerClock:
    fake = BreakerClock()
    monkeypatch.setattr(breaker, "clock", fake)
    return fake


def _start_redis(port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(  # noqa: S603
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],  # noqa: S607
        stdout=subprocess.DEVNULL,
    )
    for _ in range(50):
        try:
            # A plain client: no breaker of this port opens while the server starts.
            redis_py.Redis(port=port).ping()
            break
        except redis_py.ConnectionError:
            time.sleep(0.05)
    return proc


@pytest.fixture
def redis_server() -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    port = _free_port()
    proc = _start_redis(port)
    reset_breakers()
    yield port, proc
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGCONT)
        proc.terminate()
        proc.wait(5)
    reset_breakers()


def _timed_failure(client: redis_py.Redis) -> float:
    start = time.perf_counter()
    with pytest.raises(redis_py.RedisError):
        client.get("k")
    return time.perf_counter() - start


def test_hung_redis_costs_one_timeout_then_fails_fast(
    redis_server: tuple[int, subprocess.Popen[bytes]], breaker_clock: BreakerClock
) -> None:
    port, proc = redis_server
    client = _client(port)
    client.set("k", "v")
    os.kill(proc.pid, signal.SIGSTOP)
    assert _timed_failure(client) < 0.5  # one socket timeout
    fast = [_timed_failure(client) for _ in range(20)]
    assert max(fast) < 0.02  # breaker open: no network wait at all
    os.kill(proc.pid, signal.SIGCONT)
    assert redis_py.Redis(port=port, socket_timeout=5).ping()  # answering again (a plain client waits for it)
    breaker_clock.advance(COOLDOWN - 0.1)
    assert _timed_failure(client) < 0.02  # still within the cooldown: failing fast
    breaker_clock.advance(0.2)  # cooldown over: the next call probes and succeeds
    assert client.get("k") == b"v"
    assert client.get("k") == b"v"


def test_stopped_redis_recovers_after_restart(
    redis_server: tuple[int, subprocess.Popen[bytes]], breaker_clock: BreakerClock
) -> None:
    port, proc = redis_server
    client = _client(port)
    client.set("k", "v")
    proc.terminate()
    proc.wait(5)
    assert _timed_failure(client) < 0.5
    assert _timed_failure(client) < 0.02
    restarted = _start_redis(port)
    try:
        breaker_clock.advance(COOLDOWN - 0.1)
        assert _timed_failure(client) < 0.02  # back, but within the cooldown: failing fast
        breaker_clock.advance(0.2)
        assert client.set("k", "again")
        assert client.get("k") == b"again"
    finally:
        restarted.terminate()
        restarted.wait(5)
