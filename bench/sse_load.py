"""Thousands of open event streams on one uvicorn worker: count, bytes each, event delay.

``python -m bench.sse_load [--streams 10000] [--events 300]``

Serves ``config.asgi:application`` with one uvicorn worker and the bench
settings (database ``BENCH_DATABASE_URL``, Redis ``BENCH_REDIS_URL``), gives
``--streams`` users a token each and opens one stream per user from this
process (plain asyncio sockets on uvloop when installed, so the client stays
light). Then:

- memory: the server's RSS before and after the streams opened, per stream;
- Redis: the server process's pub/sub connections (``CLIENT LIST TYPE pubsub``
  by the hub's name) and every connection it holds, before and after;
- PostgreSQL: the bench database's connections while the streams are open;
- delay of a user's event: ``--events`` events to random users, published
  here (``live.transport.inbox_changed``, as a write does) and timed to their arrival;
- delay of a broadcast: a few events to everyone (``live.transport.broadcast``),
  timed to their arrival on every stream (p50, p99, last) twice: to each
  stream's socket by the kernel's receive stamp with this client asleep
  (``Stamps``: what the server gets out, as to browsers elsewhere), then as
  this client reads them, its reading sharing the server's cores; and the
  server's CPU time (user + system, from /proc) over each broadcast: the
  server's own cost, whatever else the machine runs meanwhile;
- the machine's floor for that broadcast (``floor``): the same streams opened
  to a bare server instead (one thread, plain blocking sockets, no Django,
  no ASGI, no Redis) that writes the same kind of frame to each in one loop of
  send() calls, timed by the same client in the same two ways: what writing
  each stream in turn from one thread gets out on this machine.

The file descriptor limit is raised to its hard limit (client and server each
need one per stream). On loopback the server's writes also pay for the
kernel's receiving side of each stream (a browser elsewhere would not).
``--pin`` puts the server on one core and the client on the other. Not part
of the test suite.
"""

import argparse
import asyncio
import os
import random
import resource
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
STREAM = "/api/v1/inbox/stream/"
# The application served: the project's, or another module's with the same
# Django behind it (BENCH_LIVE_APP=module:attribute).
APP = os.environ.get("BENCH_LIVE_APP", "config.asgi:application")
MARK = b'"reason":"bench-'


def _raise_fd_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _prepare(count: int) -> list[tuple[int, str]]:
    """(user id, token) for ``count`` bench users."""
    import django

    django.setup()
    from bench.__main__ import _ensure_database

    _ensure_database()
    from django.core.management import call_command

    from bench.data import ensure_users, issue_tokens

    call_command("migrate", verbosity=0)
    from django.contrib.auth import get_user_model

    low, high = ensure_users(count)
    user_ids = list(
        get_user_model()
        .objects.filter(pk__gte=low, pk__lte=high, username__regex=r"^bench[0-9]+$")
        .order_by("pk")
        .values_list("pk", flat=True)[:count]
    )
    tokens = issue_tokens(get_user_model().objects.filter(pk__in=user_ids).only("pk", "password"))
    from django.db import connection

    connection.close()
    return [(user_id, tokens[user_id]) for user_id in user_ids]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.bench",
        # Streams stay open for the whole measurement (a browser reconnects anyway).
        "MESSAGECENTER_LIVE_STREAM_SECONDS": "3600",
        "MESSAGECENTER_LIVE_HEARTBEAT_SECONDS": "30",
    }
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    command = [sys.executable, "-m", "uvicorn", APP, "--workers", "1"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--no-access-log", "--backlog", "8192"]
    command += ["--timeout-keep-alive", "3600", "--timeout-graceful-shutdown", "2"]
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
    )


def _cpu(pid: int) -> tuple[float, float]:
    """The process's CPU time so far (all threads), user and system, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


class Stream(asyncio.Protocol):
    """One open stream: notes when hello and each marked event arrive.

    Until hello it parses the response's blocks; after that it only looks for
    the marked events' tags in what arrives (with the few bytes a read may
    have cut off kept for the next one): a broadcast makes ten thousand of
    these calls on the core the server shares, and each one's time is part of
    the delay measured."""

    def __init__(self, book: "Book") -> None:
        self.book = book
        self.hello = asyncio.get_running_loop().create_future()
        self.buffer = b""
        self.status = 0
        self.transport: Any = None
        self.ready = False

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        if self.ready:
            self._marks(self.buffer + data if self.buffer else data, now)
            return
        self.buffer += data
        while b"\n\n" in self.buffer:
            block, self.buffer = self.buffer.split(b"\n\n", 1)
            if not self.status and block.startswith(b"HTTP/1.1 "):
                self.status = int(block[9:12])
                if self.status != 200 and not self.hello.done():
                    self.hello.set_exception(RuntimeError(f"status {self.status}"))
                continue
            if b"event: hello" in block and not self.hello.done():
                self.hello.set_result(None)
                self.ready = True
                rest, self.buffer = self.buffer, b""
                if rest:
                    self._marks(rest, now)
                return
            if b"event: unavailable" in block and not self.hello.done():
                self.hello.set_exception(RuntimeError("unavailable"))

    def _marks(self, data: bytes, now: float) -> None:
        position = 0
        while (marker := data.find(MARK, position)) >= 0:
            start = marker + len(MARK)
            end = data.find(b'"', start)
            if end < 0:
                self.buffer = data[marker:]  # the tag's end comes with the next read
                return
            self.book.arrived.setdefault(data[start:end].decode(), []).append(now)
            position = end
        # A marker cut by the read boundary: its start is in these last bytes.
        self.buffer = data[max(position, len(data) - len(MARK) + 1) :]

    def connection_lost(self, exc: Exception | None) -> None:
        self.book.lost += 1
        if not self.hello.done():
            self.hello.set_exception(ConnectionError("closed before hello"))


class Book:
    def __init__(self) -> None:
        self.arrived: dict[str, list[float]] = {}
        self.lost = 0


async def _open(port: int, token: str, book: Book) -> Stream:
    loop = asyncio.get_running_loop()
    _, stream = await loop.create_connection(lambda: Stream(book), "127.0.0.1", port)
    stream.transport.write(
        f"GET {STREAM} HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n"
        f"Authorization: Token {token}\r\n\r\n".encode()
    )
    await asyncio.wait_for(stream.hello, 60)
    return stream


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _redis_clients(server: int) -> tuple[int, int, int]:
    """(the server's hub pub/sub connections, its hub command connections, every
    connection it holds to Redis). Other processes on the same Redis (tests,
    other benches) are left out: the hub's names carry the server's pid, and
    the last figure counts the server's own sockets to the Redis port."""
    from django.conf import settings

    from core.redis import get_redis

    clients = get_redis().client_list()
    hub = sum(1 for c in clients if c.get("name") == f"mc-live-hub-{server}" and int(c.get("sub", 0)))
    commands = sum(1 for c in clients if c.get("name") == f"mc-live-hub-commands-{server}")
    port = urlsplit(settings.CACHES["default"]["LOCATION"]).port or 6379
    return hub, commands, len(_connections(server, port))


def _connections(pid: int, remote_port: int) -> list[int]:
    """The local ports of the process's established TCP connections to ``remote_port``."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = []
    for table in ("tcp", "tcp6"):
        with suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                # local and remote "ADDR:PORT" in hex, state 01 = established, the socket's inode
                local, remote, state, inode = (*line.split()[1:4], line.split()[9])
                if int(remote.rsplit(":", 1)[1], 16) == remote_port and state == "01" and inode in inodes:
                    found.append(int(local.rsplit(":", 1)[1], 16))
    return found


def _pg_connections(server: int) -> tuple[str, int]:
    """The server's PostgreSQL connections by state (its pool keeps a few idle),
    and how many: pg_stat_activity's rows whose client port is one of the
    server's sockets."""
    from django.conf import settings
    from django.db import connection

    ports = _connections(server, int(settings.DATABASES["default"].get("PORT") or 5432))
    if not ports:
        return "none", 0
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(state, '?'), count(*) FROM pg_stat_activity"
            " WHERE client_port = ANY(%s) AND pid <> pg_backend_pid() GROUP BY 1 ORDER BY 1",
            [ports],
        )
        states = cursor.fetchall()
    connection.close()
    return ", ".join(f"{count} {state}" for state, count in states) or "none", sum(count for _, count in states)


async def _run(args: argparse.Namespace, port: int, users: list[tuple[int, str]], server: int) -> dict[str, Any]:
    from live import transport as live

    book = Book()
    result: dict[str, Any] = {}
    # A tenth of the streams first: the hub, its connections, the threads that
    # authenticate and Django's imports are set up before the baseline is
    # taken, so the difference is what the further streams cost each.
    first = max(10, len(users) // 10)
    warm = []
    for i in range(0, first, args.batch):
        warm.extend(
            await asyncio.gather(*(_open(port, token, book) for _, token in users[i : min(first, i + args.batch)]))
        )
    await asyncio.sleep(1)
    result["redis_before"] = _redis_clients(server)
    rss_before = _rss(server)
    result["first"] = first
    streams: list[Stream] = list(warm)
    started = time.perf_counter()
    failures = 0
    reasons: dict[str, int] = {}
    batch = args.batch
    for i in range(first, len(users), batch):
        opened = await asyncio.gather(
            *(_open(port, token, book) for _, token in users[i : i + batch]), return_exceptions=True
        )
        for item in opened:
            if isinstance(item, Stream):
                streams.append(item)
            else:
                failures += 1
                kind = f"{type(item).__name__}({item})"
                reasons[kind] = reasons.get(kind, 0) + 1
        if failures and not args.keep_going:
            break
    result["open_seconds"] = time.perf_counter() - started
    result["open"] = len(streams)
    result["failures"] = failures
    result["failure_kinds"] = reasons
    await asyncio.sleep(2)  # let the server settle (freed request buffers, GC)
    result["rss_before"], result["rss_after"] = rss_before, _rss(server)
    result["redis_after"] = _redis_clients(server)
    result["pg"], result["pg_count"] = _pg_connections(server)

    # A user's event: one at a time to a random user with an open stream.
    user_delays = []
    open_users = [users[i][0] for i in range(len(streams))]
    for n in range(args.events):
        tag = f"u{n}"
        sent = time.perf_counter()
        live.inbox_changed(user_ids=[random.choice(open_users)], reason=f"bench-{tag}")
        while tag not in book.arrived and time.perf_counter() - sent < 5:
            await asyncio.sleep(0.0005)
        if tag in book.arrived:
            user_delays.append(book.arrived[tag][0] - sent)
        await asyncio.sleep(args.gap)
    result["user_delays"] = user_delays

    # A broadcast: every stream hears it. The server does nothing else
    # meanwhile: its CPU time over each is the broadcast's cost. Timed twice:
    # to its arrival at each stream's socket (the kernel's stamp, this client
    # asleep), then as this client reads it.
    def publish(tag: str) -> None:
        live.broadcast(scope=live.BROADCAST_EVERYONE, reason=f"bench-{tag}")

    stamps = Stamps(streams)
    try:
        (
            result["broadcast_delays"],
            result["broadcast_last"],
            result["broadcast_reached"],
            result["broadcast_cpu"],
        ) = stamps.broadcasts([f"b{n}" for n in range(args.broadcasts)], publish, cpu=lambda: _cpu(server))
    finally:
        stamps.close()
    await asyncio.sleep(1)
    (
        result["read_delays"],
        result["read_last"],
        result["read_reached"],
        result["read_cpu"],
    ) = await _timed_broadcasts(
        book, len(streams), [f"r{n}" for n in range(args.broadcasts)], publish, cpu=lambda: _cpu(server)
    )
    for stream in streams:
        stream.transport.close()
    return result


async def _timed_broadcasts(
    book: "Book",
    count: int,
    tags: list[str],
    publish: Callable[[str], None],
    cpu: Callable[[], tuple[float, float]] | None = None,
) -> tuple[list[float], list[float], list[int], list[tuple[float, float]]]:
    """One broadcast per tag (``publish(tag)``), each timed to its arrival on
    all ``count`` streams (30 s at most), a second apart: every delay, the
    last of each, how many streams each reached and, given ``cpu`` (a
    process's (user, system) seconds), the CPU each cost."""
    delays: list[float] = []
    lasts: list[float] = []
    reached: list[int] = []
    cpus: list[tuple[float, float]] = []
    for tag in tags:
        before = cpu() if cpu else (0.0, 0.0)
        sent = time.perf_counter()
        publish(tag)
        while len(book.arrived.get(tag, ())) < count and time.perf_counter() - sent < 30:
            await asyncio.sleep(0.001)
        if cpu:
            user, system = cpu()
            cpus.append((user - before[0], system - before[1]))
        got = [t - sent for t in book.arrived.get(tag, ())]
        delays.extend(got)
        lasts.append(max(got) if got else float("nan"))
        reached.append(len(got))
        await asyncio.sleep(1)
    return delays, lasts, reached, cpus


# Linux's socket option for a receive timestamp on each read (not every
# Python build names it).
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)


class Stamps:
    """The streams' sockets read by the kernel's clock: when each event reached
    the client's side of its stream, not when this client got round to it.

    Each stream's transport stops reading and a duplicate of its socket asks
    the kernel for the time each segment arrived (``SO_TIMESTAMPNS``): a socket
    object on the same descriptor (not a duplicate: the client already needs
    one per stream, and the limit may not allow two). A
    broadcast is then timed with this process asleep (``time.sleep``: its loop
    does not even wait on the sockets) and read once the server is done: the
    server has a core to itself and pays nothing for waking a reader, as with
    browsers on other machines, while the kernel's receiving side of loopback
    still runs on its writes. ``close`` hands the streams back to their
    transports."""

    def __init__(self, streams: list[Stream]) -> None:
        self.streams = streams
        self.sockets = []
        for stream in streams:
            stream.transport.pause_reading()
            fd = stream.transport.get_extra_info("socket").fileno()
            sock = socket.socket(fileno=fd)
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            sock.setblocking(False)
            self.sockets.append(sock)

    def arrival(self, sock: socket.socket, mark: bytes) -> int | None:
        """When the data carrying ``mark`` reached ``sock`` (ns since the epoch),
        None while it has not; what else is queued is read and dropped."""
        data = b""
        while True:
            try:
                chunk, ancillary, _, _ = sock.recvmsg(65536, socket.CMSG_SPACE(16))
            except BlockingIOError:
                return None
            if not chunk:
                return None
            data = data[-len(mark) :] + chunk
            if mark in data:
                for level, kind, value in ancillary:
                    if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                        seconds, nanoseconds = struct.unpack("qq", value[:16])
                        return seconds * 1_000_000_000 + nanoseconds
                raise RuntimeError("no receive timestamp: SO_TIMESTAMPNS is not supported here")

    def broadcasts(
        self,
        tags: list[str],
        publish: Callable[[str], None],
        cpu: Callable[[], tuple[float, float]] | None = None,
    ) -> tuple[list[float], list[float], list[int], list[tuple[float, float]]]:
        """As ``_timed_broadcasts``, timed by the kernel's stamps (blocking: the
        event loop must not run meanwhile)."""
        delays: list[float] = []
        lasts: list[float] = []
        reached: list[int] = []
        cpus: list[tuple[float, float]] = []
        for tag in tags:
            mark = MARK + tag.encode() + b'"'
            before = cpu() if cpu else (0.0, 0.0)
            sent = time.time_ns()
            publish(tag)
            got: list[float] = []
            waiting = self.sockets
            while waiting and time.time_ns() - sent < 30 * 10**9:
                time.sleep(0.25)
                still = []
                for sock in waiting:
                    stamp = self.arrival(sock, mark)
                    if stamp is None:
                        still.append(sock)
                    else:
                        got.append((stamp - sent) / 1e9)
                waiting = still
            if cpu:
                user, system = cpu()
                cpus.append((user - before[0], system - before[1]))
            delays.extend(got)
            lasts.append(max(got) if got else float("nan"))
            reached.append(len(got))
            time.sleep(0.5)
        return delays, lasts, reached, cpus

    def close(self) -> None:
        for sock in self.sockets:
            sock.detach()  # the descriptor stays the transport's, open
        for stream in self.streams:
            stream.transport.resume_reading()


def _loop_run(main: Any) -> Any:
    """asyncio.run, on uvloop when it is installed (as it is for the server):
    the client's own per-stream work shares the two cores with the server."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def measure(
    streams: int,
    *,
    events: int = 300,
    gap: float = 0.01,
    broadcasts: int = 3,
    batch: int = 250,
    pin: bool = False,
    keep_going: bool = False,
) -> dict[str, Any]:
    """Serve, open ``streams`` streams (fewer when the descriptor limit is
    lower), measure, stop the server; what ``_run`` found, with ``asked``
    (``streams``), ``wanted`` (what the limit allowed of them) and ``events``
    (the user events sent)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.bench")
    limit = _raise_fd_limit()
    wanted = streams
    if limit < wanted + 200:
        print(f"fd limit {limit}: at most {limit - 200} streams")
        wanted = limit - 200
    users = _prepare(wanted)
    port = _free_port()
    log = ROOT / "bench-sse-uvicorn.log"
    server = _serve(port, log)
    if pin and len(os.sched_getaffinity(0)) >= 2:
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(server.pid, {cpus[0]})
        os.sched_setaffinity(0, {cpus[1]})
    # This client calls Django's ORM (the connection counts) and the sync
    # Redis client from its event loop, between measurements: nothing else
    # runs then. The server is started without this flag.
    unsafe = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    settings = argparse.Namespace(events=events, gap=gap, broadcasts=broadcasts, batch=batch, keep_going=keep_going)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        result = _loop_run(_run(settings, port, users, server.pid))
    finally:
        if unsafe is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = unsafe
        if pin:
            os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
        os.killpg(server.pid, 15)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
            server.wait()
    return {**result, "asked": streams, "wanted": wanted, "events": events}


# The bare server's answer to a stream's request: what the real one sends
# first (its headers, chunked, and an opening event), byte for byte in kind.
_BARE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)


def _chunk(frame: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(frame), frame)


def bare_server(port_file: str, count: int) -> None:
    """``python -m bench.sse_load --bare-server FILE COUNT``: listen on a free
    port (written to FILE), accept ``count`` streams one by one (each request
    read to its blank line, then answered as the real server does), then for
    each line read from stdin write one event naming it to every stream, in
    one loop of send() calls: the least a server of one process can do per
    broadcast. Ends at end of input."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8192)
    Path(port_file).write_text(str(listener.getsockname()[1]))
    streams: list[socket.socket] = []
    while len(streams) < count:
        sock, _ = listener.accept()
        request = b""
        while b"\r\n\r\n" not in request:
            data = sock.recv(4096)
            if not data:
                break
            request += data
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as uvicorn sets it
        sock.sendall(_BARE_HEAD + _chunk(b'retry: 3000\n\nevent: hello\ndata: {"v":0}\n\n'))
        streams.append(sock)
    for line in sys.stdin:
        tag = line.strip()
        frame = _chunk(b'event: message\ndata: {"reason":"bench-%s","spread":0}\n\n' % tag.encode())
        for sock in streams:
            sock.send(frame)
    for sock in streams:
        sock.close()


async def _floor_run(port: int, count: int, broadcasts: int, batch: int, feed: Any) -> dict[str, Any]:
    book = Book()
    streams: list[Stream] = []
    for i in range(0, count, batch):
        streams.extend(await asyncio.gather(*(_open(port, "-", book) for _ in range(min(batch, count - i)))))
    await asyncio.sleep(1)

    def publish(tag: str) -> None:
        feed.write(f"{tag}\n".encode())
        feed.flush()

    stamps = Stamps(streams)
    try:
        delays, lasts, reached, _ = stamps.broadcasts([f"f{n}" for n in range(broadcasts)], publish)
    finally:
        stamps.close()
    await asyncio.sleep(1)
    read, read_lasts, read_reached, _ = await _timed_broadcasts(
        book, len(streams), [f"g{n}" for n in range(broadcasts)], publish
    )
    for stream in streams:
        stream.transport.close()
    return {
        "floor_delays": delays,
        "floor_last": lasts,
        "floor_reached": reached,
        "floor_read_delays": read,
        "floor_read_last": read_lasts,
        "floor_read_reached": read_reached,
    }


def floor(streams: int, *, broadcasts: int = 3, batch: int = 250) -> dict[str, Any]:
    """The machine's floor for a broadcast to ``streams`` streams: the bare
    server (``bare_server``) and this process's client, as ``measure`` times
    the real one (the same ``Stream`` protocol on the same event loop)."""
    limit = _raise_fd_limit()
    count = min(streams, limit - 200)
    with TemporaryDirectory() as scratch:
        port_file = Path(scratch) / "port"
        server = subprocess.Popen(
            [sys.executable, "-m", "bench.sse_load", "--bare-server", str(port_file), str(count)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 30
            while not port_file.exists() or not port_file.read_text():
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("the bare server did not start")
                time.sleep(0.05)
            port = int(port_file.read_text())
            result = _loop_run(_floor_run(port, count, broadcasts, batch, server.stdin))
        finally:
            if server.stdin:
                server.stdin.close()
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, 9)
                server.wait()
    return {**result, "floor_streams": count}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=300, help="events to single users")
    parser.add_argument("--gap", type=float, default=0.01, help="seconds between two user events")
    parser.add_argument("--broadcasts", type=int, default=3)
    parser.add_argument("--batch", type=int, default=250, help="streams opened concurrently")
    parser.add_argument("--keep-going", action="store_true", help="keep opening after a stream failed")
    parser.add_argument(
        "--pin",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="server on one core, this client on another (the client stands for browsers elsewhere)",
    )
    parser.add_argument("--bare-server", nargs=2, metavar=("PORT_FILE", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_server:
        bare_server(args.bare_server[0], int(args.bare_server[1]))
        return 0
    result = measure(
        args.streams,
        events=args.events,
        gap=args.gap,
        broadcasts=args.broadcasts,
        batch=args.batch,
        pin=args.pin,
        keep_going=args.keep_going,
    )
    result.update(floor(args.streams, broadcasts=args.broadcasts, batch=args.batch))
    for name, value, met in findings(result):
        verdict = "" if met is None else ("met" if met else "MISSED")
        print(f"{name}  {value}  {verdict}")
    return 0


def spread_text(r: dict[str, Any], name: str) -> str:
    """p50, p99 and the last of the broadcasts ``measure`` or ``floor`` timed
    under ``name`` ("broadcast", "read", "floor", "floor_read"), and how many
    streams each reached."""
    delays = r[f"{name}_delays"]
    return (
        f"p50 {quantile(delays, 0.5) * 1000:.0f} ms, p99 {quantile(delays, 0.99) * 1000:.0f} ms, "
        f"last {max(r[f'{name}_last']) * 1000:.0f} ms, reached {r[f'{name}_reached']}"
    )


def findings(r: dict[str, Any]) -> list[tuple[str, str, bool | None]]:
    """(what, the figures, whether its target is met; None: no target) of one ``measure``."""
    wanted = r["wanted"]
    each = (r["rss_after"] - r["rss_before"]) / max(1, r["open"] - r["first"])
    user = r["user_delays"]
    spread = r["broadcast_delays"]
    hub_before, _, total_before = r["redis_before"]
    hub_after, commands_after, total_after = r["redis_after"]
    p99 = quantile(user, 0.99) * 1000
    rows = [
        (
            "streams open (target >= 10,000)",
            f"{r['open']:,} of {wanted:,} in {r['open_seconds']:.1f} s, {r['failures']} failed"
            + "".join(f", {count} {kind}" for kind, count in sorted(r["failure_kinds"].items())),
            r["open"] >= 10_000,
        ),
        (
            "bytes each (target <= 20 KB)",
            f"{each / 1024:.1f} KB (RSS {r['rss_before'] / 2**20:.0f} MiB at {r['first']:,} streams -> "
            f"{r['rss_after'] / 2**20:.0f} MiB at {r['open']:,})",
            each <= 20 * 1024,
        ),
        (
            "event delay p99, a user's event (target <= 100 ms)",
            f"p50 {quantile(user, 0.5) * 1000:.1f} ms, p99 {p99:.1f} ms ({len(user)}/{r['events']} arrived)",
            p99 <= 100,
        ),
        (
            "event delay p99, a broadcast to every stream, at its socket (target <= 100 ms)",
            spread_text(r, "broadcast"),
            quantile(spread, 0.99) * 1000 <= 100,
        ),
        ("the same broadcast, as this client reads it", spread_text(r, "read"), None),
        (
            "the machine's floor for that broadcast (bare sockets, one process, same client), at its socket",
            spread_text(r, "floor"),
            None,
        )
        if "floor_delays" in r
        else ("the machine's floor for that broadcast", "not measured", None),
        ("the floor, as this client reads it", spread_text(r, "floor_read"), None)
        if "floor_read_delays" in r
        else ("the floor, as this client reads it", "not measured", None),
        (
            "server CPU per broadcast to every stream (user + system)",
            ", ".join(f"{(u + k) * 1000:.0f} ms ({u * 1000:.0f} + {k * 1000:.0f})" for u, k in r["broadcast_cpu"])
            + f"; {min(u + k for u, k in r['broadcast_cpu']) / max(1, r['open']) * 1e6:.1f} us a stream at best",
            None,
        ),
        (
            "Redis pub/sub connections of the process (target 1)",
            f"{hub_before} before, {hub_after} with the streams open",
            hub_after == 1,
        ),
        (
            "Redis connections per stream (target ~0: a fixed few per process)",
            f"{(total_after - total_before) / max(1, r['open'] - r['first']):.4f} "
            f"(the server's connections to Redis {total_before} -> {total_after}; "
            f"the hub's command pool {commands_after} of at most 4)",
            total_after - total_before <= 16,
        ),
        ("the server's PostgreSQL connections while streaming (its pool's idle ones)", r["pg"], None),
    ]
    return rows


if __name__ == "__main__":
    sys.exit(main())
