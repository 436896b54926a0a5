"""Fault tests against a real ``redis-server`` that the test stops and restarts.

The ``redis_server`` fixture starts a private server on a free port (6390 plus
the run's test slot, or the next free one), points the project at it
(``CACHES`` overridden: Django drops its cache handlers on that change, so the
read model's client follows) and hands the test ``stop()``, ``start()``,
``freeze()`` and ``thaw()``. Tests using it carry the ``redis_server`` marker
and are deselected, visibly, where ``redis-server`` is not installed.
"""

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
import redis as redis_py
from django.conf import settings
from django.test import override_settings

from config.settings.base import _redis_cache
from config.settings.test import try_lock
from core.breaker import reset_breakers
from core.local_cache import local_caches_clear
from durability import healing, outbox
from tests.conftest import note_deselection

BASE_PORT = 6390


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if shutil.which("redis-server") is not None:
        return
    chosen = [item for item in items if item.get_closest_marker("redis_server")]
    if chosen:
        config.hook.pytest_deselected(items=chosen)
        items[:] = [item for item in items if not item.get_closest_marker("redis_server")]
        note_deselection(config, f"{len(chosen)} fault tests deselected: redis-server is not installed")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# Lock files of the ports this process took, held until RedisServer.close().
_PORT_LOCKS: dict[int, IO[str]] = {}


def _free_port() -> int:
    """A free port, with a lock file held for it until the server on it is
    closed: two test processes (xdist workers, runs side by side) that both
    find a port free cannot both take it."""
    start = BASE_PORT + int(getattr(settings, "TEST_SLOT", 0))
    for port in range(start, start + 200):
        if port in _PORT_LOCKS:
            continue
        handle = try_lock(f"port-{port}")
        if handle is None:
            continue
        if _port_free(port):
            _PORT_LOCKS[port] = handle
            return port
        handle.close()
    raise RuntimeError("no free port for a test redis-server")


class RedisServer:
    """A redis-server process on a fixed port: stopped and started again on the same one."""

    def __init__(self, *, port: int, workdir: Path) -> None:
        self.port = port
        self.workdir = workdir
        self.url = f"redis://127.0.0.1:{port}/0"
        self.process: subprocess.Popen[bytes] | None = None
        self.frozen = False

    def start(self) -> None:
        assert self.process is None, "already running"
        self.process = subprocess.Popen(  # noqa: S603
            [
                shutil.which("redis-server") or "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                # Ours, not another process's server that took the port meanwhile.
                if self.client().info("server")["process_id"] == self.process.pid:
                    return
            except (redis_py.RedisError, OSError):
                pass
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        raise RuntimeError(f"redis-server on port {self.port} did not start")

    def stop(self, *, keep_data: bool = False, keep_snapshot: bool = False) -> None:
        """Kill it (the data is lost, as with a crash), or, ``keep_data``, shut it
        down saving a dump the next ``start`` loads (a restart with persistence).
        ``keep_snapshot``: kill it, and the next ``start`` loads the dump an
        earlier ``SAVE`` wrote (a crash with persistence: what came after the
        snapshot is lost, as with a failover to a replica that lagged)."""
        assert self.process is not None, "not running"
        self.thaw()
        if keep_data:
            self.client().shutdown(save=True)
        else:
            self.process.send_signal(signal.SIGKILL)
            dump = self.workdir / "dump.rdb"
            if dump.exists() and not keep_snapshot:
                os.remove(dump)
        self.process.wait(10)
        self.process = None

    def freeze(self) -> None:
        """SIGSTOP: connections are accepted but never answered (a hung server)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)
        self.frozen = True

    def thaw(self) -> None:
        if self.process is not None and self.frozen:
            self.process.send_signal(signal.SIGCONT)
        self.frozen = False

    def client(self) -> Any:
        """A client of its own (not the project's): for the test to look at the data."""
        return redis_py.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1, socket_timeout=1)

    def close(self) -> None:
        if self.process is not None:
            self.thaw()
            self.process.kill()
            self.process.wait(10)
            self.process = None
        lock = _PORT_LOCKS.pop(self.port, None)
        if lock is not None:
            lock.close()


def start_private_server(workdir: Path, attempts: int = 5) -> RedisServer:
    """A started redis-server on a free port. A port can still be taken between
    the check and the start by a server no lock knows of (one left running by
    a killed run): ours then exits, and the next free port is tried."""
    for attempt in range(attempts):
        server = RedisServer(port=_free_port(), workdir=workdir)
        try:
            server.start()
        except RuntimeError:
            server.close()
            if attempt == attempts - 1:
                raise
            continue
        return server
    raise AssertionError("unreachable")


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = start_private_server(tmp_path)
    try:
        with override_settings(CACHES={**settings.CACHES, "default": _redis_cache(server.url)}):
            reset_breakers()
            local_caches_clear()  # id lists of the suite's Redis mean nothing here
            yield server
    finally:
        server.close()
        reset_breakers()
        local_caches_clear()


# Detection is at most one check interval (1 s) away; the rebuild of a few rows takes well under a second.
HEALED_WITHIN_SECONDS = 8.0


def wait_healer() -> None:
    thread = healing.healer_thread()
    if thread is not None:
        thread.join(30)


@pytest.fixture
def healing_on(redis_server: RedisServer) -> Iterator[RedisServer]:
    """Self-healing on, checking the marker every second, on the private server.

    override_settings, not pytest-django's ``settings``: that one would restore
    the settings of when it was first changed, the private server's CACHES
    included, after the server fixture has put the suite's back."""
    healing.forget()
    outbox.forget_local_state()
    try:
        with override_settings(MESSAGECENTER_SELF_HEALING=True, MESSAGECENTER_HEALING_CHECK_SECONDS=1.0):
            try:
                yield redis_server
            finally:
                wait_healer()
    finally:
        healing.forget()
        outbox.forget_local_state()
