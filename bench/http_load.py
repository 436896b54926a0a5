"""The HTTP cases' machinery: gunicorn (WSGI) or uvicorn (ASGI) serving the
project with the bench settings, wrk putting a bounded load on loopback
(one token, or a Lua script rotating many users' tokens), the server stopped
by process group whatever happens."""

import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

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


def free_port() -> int:
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


def server_command(kind: str, port: int) -> list[str]:
    """The README's commands, at WORKERS processes: gunicorn's sync workers
    (WSGI) or uvicorn's workers (ASGI)."""
    if kind == "wsgi":
        return [
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
        ]
    if kind == "asgi":
        return [
            sys.executable,
            "-m",
            "uvicorn",
            "config.asgi:application",
            "--workers",
            str(WORKERS),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-access-log",
            "--log-level",
            "warning",
        ]
    raise ValueError(f"unknown server kind {kind!r}")


@contextmanager
def gunicorn(*, settings_module: str = "config.settings.bench") -> Iterator[str]:
    """Serve the project with gunicorn on a free loopback port; yields the base URL."""
    with serve("wsgi", settings_module=settings_module) as base:
        yield base


@contextmanager
def serve(
    kind: str, *, settings_module: str = "config.settings.bench", env: dict[str, str] | None = None
) -> Iterator[str]:
    """Serve the project (``kind`` "wsgi" or "asgi") on a free loopback port; yields the base URL."""
    port = free_port()
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": settings_module, **(env or {})}
    process = subprocess.Popen(
        server_command(kind, port),
        cwd=ROOT,
        env=environment,
        start_new_session=True,  # its own process group: the master and workers stop together
        stdout=subprocess.DEVNULL,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_server(process)


def stop_server(process: subprocess.Popen[Any]) -> None:
    """Stop a server started in its own session: its whole process group, by
    SIGTERM, then SIGKILL when it has not gone within 15 seconds."""
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
            raise RuntimeError(f"the server did not answer /bench/ping with 200 within {timeout:.0f} s")
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
    return _parse(done.stdout, done.stderr, path=url.split("/", 3)[-1])


def _parse(out: str, err: str, *, path: str) -> Load:
    percentiles = dict(re.findall(r"^\s+(50|99)\.000%\s+(\S+)\s*$", out, re.M)) or dict(
        re.findall(r"^\s+(50|99)%\s+(\S+)\s*$", out, re.M)
    )
    requests = re.search(r"(\d+) requests in", out)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    socket_errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if not (requests and rps and "50" in percentiles and "99" in percentiles):
        raise RuntimeError(f"could not read wrk's output:\n{out}\n{err}")
    return Load(
        path=path,
        requests=int(requests.group(1)),
        rps=float(rps.group(1)),
        p50=_seconds(percentiles["50"]),
        p99=_seconds(percentiles["99"]),
        non_2xx=int(non_2xx.group(1)) if non_2xx else 0,
        errors=sum(int(g) for g in socket_errors.groups()) if socket_errors else 0,
    )


# --- many users: a wrk Lua script rotating their tokens ----------------------------------


@dataclass(frozen=True)
class Step:
    """One kind of request of a workload: ``path`` may name ``{ref}``, an item
    the request's user holds (marks), taken from the script's refs in turn."""

    method: str
    path: str


def _lua_string(value: str) -> str:
    if any(c in value for c in '"\\\n\r'):
        raise ValueError(f"unexpected character in {value!r}")
    return f'"{value}"'


def rotating_script(*, tokens: Sequence[str], steps: Sequence[Step], threads: int, refs: Sequence[str] = ()) -> str:
    """A wrk script: request n (counted across wrk's threads) authenticates as
    user ``n mod len(tokens)`` and is step ``(n + n div len(tokens)) mod
    len(steps)`` of the workload (each pass over the users shifts the step,
    so every user meets every step); a ``{ref}`` in a path is
    ``refs[n div len(tokens) mod len(refs)]`` (each pass a different item).
    Statuses 429 (throttled) and other non-2xx are counted apart and printed
    by ``done`` as one ``ROTATING`` line."""
    if not tokens or not steps or threads < 1:
        raise ValueError("tokens, steps and threads are required")
    if any("{ref}" in step.path for step in steps) and not refs:
        raise ValueError("a step names {ref}: refs are required")
    parts = []
    for step in steps:
        head, _, tail = step.path.partition("{ref}")
        parts.append(
            f"{{{_lua_string(step.method)}, {_lua_string(head)}, {_lua_string(tail)}, {int('{ref}' in step.path)}}}"
        )
    lines = [
        "-- Generated by bench/http_load.py (rotating_script).",
        "local tokens = {" + ", ".join(_lua_string(t) for t in tokens) + "}",
        "local steps = {" + ", ".join(parts) + "}",
        "local refs = {" + ", ".join(_lua_string(r) for r in refs) + "}",
        f"local threads = {int(threads)}",
        "local created = {}",
        "local counter = 0",
        "throttled, bad = 0, 0",
        "function setup(thread)",
        "  thread:set('id', #created)",
        "  table.insert(created, thread)",
        "end",
        "function request()",
        "  local n = counter * threads + id",
        "  counter = counter + 1",
        "  local user = n % #tokens",
        "  local pass = math.floor(n / #tokens)",
        "  local step = steps[(n + pass) % #steps + 1]",
        "  local path = step[2]",
        "  if step[4] == 1 then path = path .. refs[pass % #refs + 1] .. step[3] end",
        "  local headers = {Authorization = 'Token ' .. tokens[user + 1]}",
        "  if step[1] ~= 'GET' then",
        "    headers['Content-Type'] = 'application/json'",
        "    return wrk.format(step[1], path, headers, '{}')",
        "  end",
        "  return wrk.format(step[1], path, headers)",
        "end",
        "function response(status, headers, body)",
        "  if status == 429 then throttled = throttled + 1",
        "  elseif status < 200 or status >= 300 then bad = bad + 1 end",
        "end",
        "function done(summary, latency, requests)",
        "  local t, b = 0, 0",
        "  for _, thread in ipairs(created) do",
        "    t = t + thread:get('throttled')",
        "    b = b + thread:get('bad')",
        "  end",
        "  io.write(string.format('ROTATING throttled=%d bad=%d\\n', t, b))",
        "end",
    ]
    return "\n".join(lines) + "\n"


@dataclass
class RotatingLoad(Load):
    throttled: int = 0  # 429 answers
    bad: int = 0  # other non-2xx answers
    rounds: tuple[float, ...] = ()  # requests/s of each round, when several were run
    latencies: tuple[float, ...] = field(default=(), repr=False)  # seconds, each request's (a cold pass)
    seconds: float = 0.0  # a cold pass's length


def pooled(loads: Sequence[RotatingLoad]) -> RotatingLoad:
    """Cold passes of one endpoint taken as one: every request's latency, the
    answers and failures of all, requests/s over their summed length."""
    latencies = tuple(sorted(t for load in loads for t in load.latencies))
    ordered = latencies or (float("nan"),)
    seconds = sum(load.seconds for load in loads)
    requests = sum(load.requests for load in loads)
    return RotatingLoad(
        path=loads[0].path,
        requests=requests,
        rps=requests / seconds if seconds else float("nan"),
        p50=ordered[len(ordered) // 2],
        p99=ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))],
        non_2xx=sum(load.non_2xx for load in loads),
        errors=sum(load.errors for load in loads),
        throttled=sum(load.throttled for load in loads),
        bad=sum(load.bad for load in loads),
        latencies=latencies,
        seconds=seconds,
    )


def run_wrk_script(
    script: str, url: str, *, seconds: int, connections: int, latency: bool = False
) -> subprocess.CompletedProcess[str]:
    """``seconds`` of wrk load on ``url`` from a Lua ``script`` (written to a
    temporary file for the run); wrk's finished process, its output as text."""
    binary = shutil.which("wrk")
    if binary is None:
        raise RuntimeError("wrk is missing: `make bench` installs it (apt-get install wrk)")
    with tempfile.NamedTemporaryFile("w", suffix=".lua", prefix="bench-wrk-", delete=False) as handle:
        handle.write(script)
    try:
        command = [binary, f"-t{WRK_THREADS}", f"-c{connections}", f"-d{seconds}s", "--timeout", "5s"]
        return subprocess.run(
            [*command, *(["--latency"] if latency else []), "-s", handle.name, url],
            capture_output=True,
            text=True,
            timeout=seconds + 30,
            check=True,
        )
    finally:
        os.unlink(handle.name)


def wrk_rotating(
    *,
    base: str,
    tokens: Sequence[str],
    steps: Sequence[Step],
    seconds: int,
    refs: Sequence[str] = (),
) -> RotatingLoad:
    """``seconds`` of load from a script rotating ``tokens``; the URL's path comes from the steps."""
    script = rotating_script(tokens=tokens, steps=steps, threads=WRK_THREADS, refs=refs)
    done = run_wrk_script(script, base, seconds=seconds, connections=CONNECTIONS, latency=True)
    load = _parse(done.stdout, done.stderr, path=",".join(sorted({s.path for s in steps})))
    counted = re.search(r"ROTATING throttled=(\d+) bad=(\d+)", done.stdout)
    if not counted:
        raise RuntimeError(f"the rotating script printed no counts:\n{done.stdout}\n{done.stderr}")
    throttled, bad = (int(g) for g in counted.groups())
    return RotatingLoad(**load.__dict__, throttled=throttled, bad=bad)


def cold_pass(*, base: str, tokens: Sequence[str], step: Step, concurrency: int = CONNECTIONS) -> RotatingLoad:
    """Each user asked exactly once (their first request), ``concurrency`` at
    a time, by an asyncio client: wrk cannot stop after one request per user
    without leaving connections a sync worker would wait on. Latency is per
    request; requests/s is over the whole pass."""
    if "{ref}" in step.path:
        raise ValueError("a cold pass reads: no {ref}")
    latencies: list[float] = []
    statuses: list[int] = []
    errors = 0

    async def main() -> None:
        queue = iter(tokens)
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        async with httpx.AsyncClient(base_url=base, limits=limits, timeout=httpx.Timeout(30.0)) as client:

            async def worker() -> None:
                nonlocal errors
                for token in queue:
                    started = time.perf_counter()
                    try:
                        response = await client.request(
                            step.method, step.path, headers={"Authorization": f"Token {token}"}
                        )
                    except httpx.HTTPError:
                        errors += 1
                        continue
                    latencies.append(time.perf_counter() - started)
                    statuses.append(response.status_code)

            await asyncio.gather(*(worker() for _ in range(concurrency)))

    started = time.perf_counter()
    asyncio.run(main())
    elapsed = time.perf_counter() - started
    ordered = sorted(latencies) or [float("nan")]
    throttled = sum(1 for s in statuses if s == 429)
    bad = sum(1 for s in statuses if not 200 <= s < 300 and s != 429)
    return RotatingLoad(
        path=step.path,
        requests=len(statuses),
        rps=len(statuses) / elapsed,
        p50=ordered[len(ordered) // 2],
        p99=ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))],
        non_2xx=throttled + bad,
        errors=errors,
        throttled=throttled,
        bad=bad,
        latencies=tuple(ordered) if latencies else (),
        seconds=elapsed,
    )
