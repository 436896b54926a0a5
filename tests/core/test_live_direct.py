"""The hub writes events straight to the sockets of a real uvicorn's responses.

An in-process uvicorn (its httptools protocol, as deployed) serves the
stream's own route, ``LiveStreamRoute``, with authentication stubbed to a
user per token. Each stream's response lends the hub its socket
(``live_asgi.direct_write``): a broadcast reaches every stream as one proper
chunk of its chunked response, written by the hub (and its helper threads)
rather than through uvicorn's send, and what came before it (the opening)
and after it (the end of the response) still go through uvicorn in order.
Under uvicorn's h11 protocol, or under TLS (where the socket carries the
encrypted stream), no socket is lent and the same events go through its send.
"""

import asyncio
import socket
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from core import live, live_asgi, metrics

pytestmark = pytest.mark.not_on_cluster(reason="event streams are off on Redis Cluster by design (pages poll)")

FIRST_USER = 993_001
STREAMS = 6
STREAM_SECONDS = 4  # the streams' cap: long enough to open them all and broadcast


async def _not_django(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError(f"the stream's route handed {scope['path']} on")


async def _read_until(reader: asyncio.StreamReader, marker: bytes, seen: bytes = b"") -> bytes:
    while marker not in seen:
        data = await asyncio.wait_for(reader.read(65536), 10)
        assert data, f"the stream closed before {marker!r}: {seen!r}"
        seen += data
    return seen


def _body(raw: bytes) -> bytes:
    """The body of a chunked HTTP/1.1 response, checking each chunk's framing."""
    head, rest = raw.split(b"\r\n\r\n", 1)
    assert b"transfer-encoding: chunked" in head.lower()
    body = b""
    while True:
        size_line, rest = rest.split(b"\r\n", 1)
        size = int(size_line, 16)
        assert rest[size : size + 2] == b"\r\n", "a chunk's framing"
        body += rest[:size]
        rest = rest[size + 2 :]
        if size == 0:
            assert rest == b"", "nothing after the last chunk"
            return body


def _certificate(folder: Path) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 and its key (the openssl command)."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    command = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"]
    subprocess.run([*command, "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)  # noqa: S603
    return str(cert), str(key)


async def _scenario(http: str, tls: tuple[str, str] | None = None) -> tuple[list[bytes], list[Any], float]:
    lent: list[Any] = []
    real_direct_write = live_asgi.direct_write

    def recorded(send: Any) -> Any:
        direct = real_direct_write(send)
        lent.append(direct)
        return direct

    live_asgi.direct_write = recorded  # type: ignore[assignment]
    app = live_asgi.LiveStreamRoute(_not_django, path="/stream/", event="inbox")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    options: dict[str, Any] = {"ssl_certfile": tls[0], "ssl_keyfile": tls[1]} if tls else {}
    config = uvicorn.Config(app, http=http, loop="asyncio", lifespan="off", log_level="warning", **options)
    client_tls: ssl.SSLContext | None = None
    if tls:
        client_tls = ssl.create_default_context(cafile=tls[0])
        client_tls.check_hostname = False
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[listener]))
    written = metrics.LIVE_WRITES.labels(way="direct")._value.get()
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        port = listener.getsockname()[1]
        streams = []
        for n in range(STREAMS):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_tls)
            writer.write(f"GET /stream/ HTTP/1.1\r\nHost: t\r\nAuthorization: Token t{n}\r\n\r\n".encode())
            streams.append((reader, writer, await _read_until(reader, b"event: hello")))
        await asyncio.to_thread(live.broadcast, scope=live.BROADCAST_EVERYONE, reason="bulletin")
        raw = [await _read_until(reader, b"bulletin", seen) for reader, _, seen in streams]
        # Each stream then reaches its cap and uvicorn ends the response, after the event.
        raw = [
            await _read_until(reader, b"\r\n0\r\n\r\n", seen) for (reader, _, _), seen in zip(streams, raw, strict=True)
        ]
        written = metrics.LIVE_WRITES.labels(way="direct")._value.get() - written
        for _, writer, _ in streams:
            writer.close()
    finally:
        live_asgi.direct_write = real_direct_write  # type: ignore[assignment]
        server.should_exit = True
        await serving
        await live.hub_close()
    return raw, lent, written


@pytest.fixture
def users(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    settings.MESSAGECENTER_LIVE_STREAM_SECONDS = STREAM_SECONDS
    settings.MESSAGECENTER_LIVE_HEARTBEAT_SECONDS = 60
    # Three threads, two streams a part: the broadcast is written in parts at once.
    settings.MESSAGECENTER_LIVE_WRITE_SPLIT = 2
    monkeypatch.setattr(live, "WRITE_THREADS", 3)
    monkeypatch.setattr(live, "_writers", None)

    def identify(*, cookie: str, authorization: str) -> tuple[int, list[str]]:
        return FIRST_USER + int(authorization.removeprefix("Token t")), []

    monkeypatch.setattr(live_asgi, "identify", identify)
    yield
    if live._writers is not None:
        live._writers.shutdown()


def _events(raw: bytes) -> list[str]:
    return [block for block in _body(raw).decode().split("\n\n") if block.startswith("event: ")]


def _hello_then_the_broadcast(raw: list[bytes]) -> bool:
    event = live.broadcast_event(scope=live.BROADCAST_EVERYONE, reason="bulletin")
    expected = ['event: hello\ndata: {"v":0}', f"event: inbox\ndata: {event}"]
    return all(response.startswith(b"HTTP/1.1 200 ") and _events(response) == expected for response in raw)


def test_uvicorn_lends_the_hub_each_stream_s_socket_and_a_broadcast_arrives_as_one_chunk(users: None) -> None:
    raw, lent, written = asyncio.run(_scenario("httptools"))
    assert [type(direct).__name__ for direct in lent] == ["_UvicornDirect"] * STREAMS
    assert written == STREAMS  # every stream's event went straight to its socket
    assert _hello_then_the_broadcast(raw)


@pytest.mark.parametrize(("http", "tls"), [("h11", False), ("httptools", True)], ids=["h11", "tls"])
def test_under_h11_or_tls_no_socket_is_lent_and_the_events_go_through_send(
    users: None, tmp_path: Path, http: str, tls: bool
) -> None:
    raw, lent, written = asyncio.run(_scenario(http, _certificate(tmp_path) if tls else None))
    assert lent == [None] * STREAMS
    assert written == 0
    assert _hello_then_the_broadcast(raw)
