"""Pushes cannot be turned inward: a subscription's endpoint is whatever a
browser (or someone posing as one) sent, so its name is looked up once per
connection, every address is checked, and the connection goes to a checked
address only (DNS rebinding)."""

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from messagecenter import webpush
from tests.messagecenter.push_service import Browser, b64url

PUBLIC = "93.184.216.34"  # a global address; nothing is ever sent there (the check fails first)


class Sink:
    """An HTTP server on one loopback address that counts the POSTs it gets."""

    def __init__(self, address: str, port: int = 0) -> None:
        self.hits: list[str] = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                sink.hits.append(self.headers.get("Host", ""))
                self.send_response(201)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer((address, port), Handler)
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def sinks() -> Iterator[list[Sink]]:
    started: list[Sink] = []
    yield started
    for sink in started:
        sink.stop()


class Rebinding:
    """``socket.getaddrinfo`` for ``name``: the first answer once, the second ever after."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str, first: str, then: str) -> None:
        self.lookups = 0
        real = socket.getaddrinfo

        def lookup(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
            if host != name:
                return real(host, port, *args, **kwargs)
            self.lookups += 1
            address = first if self.lookups == 1 else then
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            return [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, int(port or 0)))]

        monkeypatch.setattr(socket, "getaddrinfo", lookup)


def _push(endpoint: str) -> webpush.PushResult:
    browser = Browser("b")
    outgoing = webpush.Outgoing(
        endpoint=endpoint,
        p256dh=browser.p256dh,
        auth=b64url(browser.auth),
        payload={"id": "m1", "title": "t", "summary": "", "url": "/inbox/m1/"},
        ttl=60,
        urgency="normal",
        topic="m1",
    )
    return webpush.pushes_send([outgoing])[0]


def test_push_dns_rebinding_cannot_reach_inside(
    monkeypatch: pytest.MonkeyPatch, settings: Any, sinks: list[Sink]
) -> None:
    """The push service's name answers a public address to the check and the
    loopback after it: the connection's own lookup is checked too, so nothing
    reaches the server listening inside."""
    settings.MESSAGECENTER_PUSH_ALLOW_LOCAL_ENDPOINTS = False
    inside = Sink("127.0.0.1")
    sinks.append(inside)
    name = "push-rebind-1.example.test"
    rebinding = Rebinding(monkeypatch, name, PUBLIC, "127.0.0.1")

    result = _push(f"http://{name}:{inside.port}/push/b")

    assert result.status is None
    assert result.error.startswith("ClientConnectorDNSError")  # refused by the checked lookup
    assert inside.hits == []
    assert rebinding.lookups == 2  # the check's, and the connection's own (checked again)


def test_push_connects_to_the_address_its_lookup_checked(
    monkeypatch: pytest.MonkeyPatch, settings: Any, sinks: list[Sink]
) -> None:
    """One lookup per connection, and the connection goes to what it answered:
    two servers on one port of two loopback addresses, only the first answer's
    is reached, and it sees the push service's name in Host."""
    settings.MESSAGECENTER_PUSH_ALLOW_LOCAL_ENDPOINTS = True
    first = Sink("127.0.0.1")
    sinks.append(first)
    second = Sink("127.0.0.2", first.port)  # Linux routes all of 127.0.0.0/8 to the loopback
    sinks.append(second)
    name = "push-rebind-2.example.test"
    rebinding = Rebinding(monkeypatch, name, "127.0.0.1", "127.0.0.2")

    result = _push(f"http://{name}:{first.port}/push/b")

    assert (result.status, result.error) == (201, "")
    assert first.hits == [f"{name}:{first.port}"]
    assert second.hits == []
    assert rebinding.lookups == 1
