"""The HTTP case's machinery: gunicorn serving the project with the bench
settings, wrk putting a bounded load on loopback, gunicorn stopped by
process group whatever happens."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WORKERS = 2  # sync workers: FACTS' HTTP floor figures use the same
CONNECTIONS = 16
WRK_THREADS = 2


@dataclass
class Load:
    path: str
    requests: int
    rps: float
    p50: float  # seconds
    p99: float
    non_2xx: int
    errors: int  # socket errors: connect, read, write, timeout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, token: str, timeout: float = 5.0) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers={"Authorization": f"Token {token}"})  # noqa: S310 - loopback
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return int(response.status), json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return int(exc.code), None


@contextmanager
def gunicorn(*, settings_module: str = "config.settings.bench") -> Iterator[str]:
    """Serve the project on a free loopback port; yields the base URL."""
    port = _free_port()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": settings_module}
    process = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("gunicorn")),
            "config.wsgi:application",
            "--workers",
            str(WORKERS),
            "--worker-class",
            "sync",
            "--bind",
            f"127.0.0.1:{port}",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
        start_new_session=True,  # its own process group: the master and workers stop together
        stdout=subprocess.DEVNULL,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=15)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)


def wait_ready(base: str, token: str, *, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            status, _ = get(f"{base}/bench/ping", token, timeout=2.0)
            if status == 200:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"gunicorn did not answer /bench/ping with 200 within {timeout:.0f} s")
        time.sleep(0.2)


_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def _seconds(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text.strip())
    if not match:
        raise ValueError(f"unexpected wrk latency {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def wrk(*, url: str, token: str, seconds: int) -> Load:
    """A bounded load: ``seconds`` of CONNECTIONS keep-alive connections, then wrk stops by itself."""
    binary = shutil.which("wrk")
    if binary is None:
        raise RuntimeError("wrk is missing: `make bench` installs it (apt-get install wrk)")
    done = subprocess.run(
        [
            binary,
            f"-t{WRK_THREADS}",
            f"-c{CONNECTIONS}",
            f"-d{seconds}s",
            "--timeout",
            "5s",
            "--latency",
            "-H",
            f"Authorization: Token {token}",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=seconds + 30,
        check=True,
    )
    out = done.stdout
    percentiles = dict(re.findall(r"^\s+(50|99)\.000%\s+(\S+)$", out, re.M)) or dict(
        re.findall(r"^\s+(50|99)%\s+(\S+)$", out, re.M)
    )
    requests = re.search(r"(\d+) requests in", out)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    socket_errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if not (requests and rps and "50" in percentiles and "99" in percentiles):
        raise RuntimeError(f"could not read wrk's output:\n{out}\n{done.stderr}")
    return Load(
        path=url.split("/", 3)[-1],
        requests=int(requests.group(1)),
        rps=float(rps.group(1)),
        p50=_seconds(percentiles["50"]),
        p99=_seconds(percentiles["99"]),
        non_2xx=int(non_2xx.group(1)) if non_2xx else 0,
        errors=sum(int(g) for g in socket_errors.groups()) if socket_errors else 0,
    )
