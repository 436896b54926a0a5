"""The project served by a real server process on the run's test database
(config/settings/test_server.py), for tests that need real sockets: the
live stream under several servers, PostgreSQL connections under load."""

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from django.conf import settings

from tests.conftest import ROOT


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_env(application_name: str, extra: dict[str, str]) -> dict[str, str]:
    """This process's environment pointed at the run's test database, cache and key
    prefix (the pool and prefix settings of this run left out), plus ``extra``."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_POOL", "MESSAGECENTER_"))},
        "DJANGO_SETTINGS_MODULE": "config.settings.test_server",
        "MESSAGECENTER_TEST_DATABASE_NAME": str(settings.DATABASES["default"]["NAME"]),
        "MESSAGECENTER_TEST_APPLICATION_NAME": application_name,
        "MESSAGECENTER_TEST_CACHE_URL": str(settings.CACHES["default"]["LOCATION"]),
        "MESSAGECENTER_KEY_PREFIX": str(settings.MESSAGECENTER_KEY_PREFIX),
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


class ServedProcess:
    """One server process started by ``command(port)`` on a spare port; its output in ``log``."""

    def __init__(self, name: str, command: list[str], *, port: int, log: Path, env: dict[str, str]) -> None:
        self.name = name
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        self.process = subprocess.Popen(  # noqa: S603
            command, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT
        )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.text()
            try:
                httpx.get(f"{self.url}/api/v1/me/", timeout=1.0)
                return
            except httpx.TransportError:
                time.sleep(0.2)
        raise AssertionError(f"{self.name} did not answer within {timeout} s:\n{self.text()}")

    def stop(self) -> int:
        """SIGTERM, as a supervisor stops it (SIGKILL after 20 s); the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return int(self.process.returncode)


@contextmanager
def serving(server: ServedProcess) -> Iterator[ServedProcess]:
    """``server`` once it answers; stopped on the way out, whatever happened."""
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
