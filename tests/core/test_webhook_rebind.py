"""Webhooks cannot be turned inward: every address a name resolves to is
checked, an attempt resolves once and connects to an address it checked (a
name that answers a public address to the check and the loopback afterwards
reaches nothing inside), and the receiver still sees its own name in the Host
header and, over https, in SNI and the certificate check.

Names are answered by a stand-in resolver (``socket.getaddrinfo`` for one
name); connections are made to real HTTP servers on the loopback."""

import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from core.api.errors import ValidationFailed
from tests.conftest import assert_error
from webhooks import services as webhooks
from webhooks.models import WebhookDelivery, WebhookDeliveryStatus, WebhookEndpoint

pytestmark = pytest.mark.django_db(transaction=True)

NAME = "hooks.example.test"
# A public address the tests never really reach: connections to it are sent to
# a local server instead (``Connections``).
PUBLIC = "93.184.215.14"
REFUSED = "The host resolves to a private or reserved address."


class Resolver:
    """Answers lookups of ``name``: the n-th lookup gets ``answers[n]`` (the
    last one from then on); every other name resolves as usual."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str, *answers: list[str]) -> None:
        self.lookups = 0
        real = socket.getaddrinfo

        def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
            if host != name:
                return real(host, port, *args, **kwargs)
            addresses = answers[min(self.lookups, len(answers) - 1)]
            self.lookups += 1
            return [
                (socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (a, port, 0, 0))
                if ":" in a
                else (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (a, port))
                for a in addresses
            ]

        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


class Connections:
    """Records every TCP connection made, and sends those to ``PUBLIC`` to a
    local server standing in for the internet."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, internet_port: int | None = None) -> None:
        self.made: list[tuple[str, int]] = []
        real = socket.create_connection

        def create_connection(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
            self.made.append((address[0], address[1]))
            if address[0] == PUBLIC and internet_port is not None:
                address = ("127.0.0.1", internet_port)
            return real(address, *args, **kwargs)

        monkeypatch.setattr(socket, "create_connection", create_connection)


class Server:
    """A real HTTP(S) server that records the Host header of every POST."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, tls: ssl.SSLContext | None = None) -> None:
        self.hosts: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                server.hosts.append(str(self.headers.get("host")))
                self.send_response(204)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        class HTTPServer(ThreadingHTTPServer):
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

        self.httpd = HTTPServer((host, port), Handler)
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.port = int(self.httpd.server_address[1])
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        server.stop()


def _start(servers: list[Server], *args: Any, **kwargs: Any) -> Server:
    server = Server(*args, **kwargs)
    servers.append(server)
    return server


def _deliver(url: str) -> WebhookDelivery:
    """One attempt of a delivery to ``url``, as the Celery task makes it; the
    endpoint is saved without the registration check (it is not under test)."""
    endpoint = WebhookEndpoint.objects.create(url=url, events=["message.sent"], secret=webhooks.webhook_secret_new())
    delivery = WebhookDelivery.objects.create(
        endpoint=endpoint,
        event="message.sent",
        message_id=f"msg_{endpoint.pk}",
        payload={"type": "message.sent", "data": {}},
        next_attempt_at=timezone.now(),
    )
    webhooks.webhook_deliver(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    return delivery


def test_dns_rebinding_cannot_reach_inside(
    monkeypatch: pytest.MonkeyPatch, settings: Any, servers: list[Server]
) -> None:
    """The name answers a public address to the check and the loopback after
    it; the request goes to the public address and nothing reaches inside."""
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = False
    inside = _start(servers)  # what the second answer would reach: the URL's port on the loopback
    internet = _start(servers)
    resolver = Resolver(monkeypatch, NAME, [PUBLIC], ["127.0.0.1"])
    connections = Connections(monkeypatch, internet_port=internet.port)

    delivery = _deliver(f"http://{NAME}:{inside.port}/hook")

    assert (delivery.status, delivery.last_status_code) == (WebhookDeliveryStatus.SUCCEEDED, 204)
    assert resolver.lookups == 1  # one lookup per attempt: the connection made none of its own
    assert connections.made == [(PUBLIC, inside.port)]
    assert internet.hosts == [f"{NAME}:{inside.port}"]
    assert inside.hosts == []


def test_rebind_pins_the_checked_address_on_the_loopback(
    monkeypatch: pytest.MonkeyPatch, settings: Any, servers: list[Server]
) -> None:
    """The same without touching sockets: two servers on one port of two
    loopback addresses; only the first answer's server is reached."""
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    first = _start(servers, "127.0.0.1")
    second = _start(servers, "127.0.0.2", first.port)  # Linux routes all of 127.0.0.0/8 to the loopback
    resolver = Resolver(monkeypatch, NAME, ["127.0.0.1"], ["127.0.0.2"])

    assert _deliver(f"http://{NAME}:{first.port}/hook").status == WebhookDeliveryStatus.SUCCEEDED
    assert resolver.lookups == 1
    assert first.hosts == [f"{NAME}:{first.port}"]
    assert second.hosts == []


def test_name_rebound_inside_is_refused_at_the_attempt(
    monkeypatch: pytest.MonkeyPatch, settings: Any, operator_client: Any
) -> None:
    """Public when registered, the cloud metadata address when delivered to:
    the attempt fails without connecting anywhere."""
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = False
    Resolver(monkeypatch, NAME, [PUBLIC], ["169.254.169.254"])
    response = operator_client.post(
        "/api/v1/manage/webhooks/", {"url": f"http://{NAME}/hook", "events": ["message.sent"]}, format="json"
    )
    assert response.status_code == 201, response.content
    connections = Connections(monkeypatch)

    delivery = _deliver(f"http://{NAME}/hook")

    assert (delivery.status, delivery.attempts, delivery.last_error) == (WebhookDeliveryStatus.PENDING, 1, REFUSED)
    assert connections.made == []


def test_name_with_public_and_private_addresses_is_refused(
    monkeypatch: pytest.MonkeyPatch, settings: Any, operator_client: Any
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = False
    Resolver(monkeypatch, NAME, [PUBLIC, "10.0.0.7"])
    error = assert_error(
        operator_client.post(
            "/api/v1/manage/webhooks/", {"url": f"https://{NAME}/hook", "events": ["message.sent"]}, format="json"
        ),
        400,
    )
    assert (error["code"], error["fields"]["url"]) == ("invalid_url", [REFUSED])
    assert not WebhookEndpoint.objects.exists()

    connections = Connections(monkeypatch)
    delivery = _deliver(f"https://{NAME}/hook")  # an endpoint saved before the name changed
    assert delivery.last_error == REFUSED
    assert connections.made == []


# Every class of address that is not the public internet, as a name's answer.
REFUSED_ADDRESSES = [
    "127.0.0.1",  # loopback
    "127.8.9.10",
    "10.1.2.3",  # private
    "172.16.0.1",
    "192.168.1.1",
    "100.64.0.1",  # carrier-grade NAT
    "169.254.169.254",  # link-local: cloud metadata
    "0.0.0.0",  # noqa: S104 - unspecified: connecting to it reaches the machine itself
    "224.0.0.1",  # multicast
    "240.0.0.1",  # reserved
    "255.255.255.255",
    "192.0.2.1",  # documentation
    "::1",  # IPv6 loopback
    "::",  # unspecified
    "fe80::1",  # link-local
    "fc00::1",  # unique local
    "fd12:3456::1",
    "fec0::1",  # site-local
    "ff02::1",  # multicast
    "2001:db8::1",  # documentation
    "::ffff:127.0.0.1",  # IPv4-mapped
    "::ffff:169.254.169.254",
    "::ffff:10.0.0.1",
    "::127.0.0.1",  # IPv4-compatible
    "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
    "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
    "64:ff9b:1::a00:1",  # NAT64 local-use prefix
    "2002:7f00:1::1",  # 6to4 of 127.0.0.1
    "2002:a00:1::1",  # 6to4 of 10.0.0.1
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo
]


@pytest.mark.parametrize("address", REFUSED_ADDRESSES)
def test_each_inner_address_class_is_refused(monkeypatch: pytest.MonkeyPatch, settings: Any, address: str) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = False
    Resolver(monkeypatch, NAME, [address])
    with pytest.raises(ValidationFailed) as refused:
        webhooks.webhook_url_check(f"https://{NAME}/hook")
    assert refused.value.message == REFUSED
    # The operator's setting lets every one of them through, as before.
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    webhooks.webhook_url_check(f"https://{NAME}/hook")


@pytest.mark.parametrize(
    "address",
    [PUBLIC, "2606:4700::1111", "::ffff:93.184.215.14", "64:ff9b::5db8:d70e", "2002:5db8:d70e::1"],
)
def test_public_addresses_pass(monkeypatch: pytest.MonkeyPatch, settings: Any, address: str) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = False
    Resolver(monkeypatch, NAME, [address])
    webhooks.webhook_url_check(f"https://{NAME}/hook")


def test_environment_proxy_is_not_used(monkeypatch: pytest.MonkeyPatch, settings: Any, servers: list[Server]) -> None:
    """A proxy would look the name up again itself: deliveries go direct to the
    checked address even with a proxy in the environment (one that would refuse)."""
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    server = _start(servers, "127.0.0.1")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # the discard port: nothing listens there
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    Resolver(monkeypatch, NAME, ["127.0.0.1"])
    assert _deliver(f"http://{NAME}:{server.port}/hook").status == WebhookDeliveryStatus.SUCCEEDED
    assert server.hosts == [f"{NAME}:{server.port}"]


def test_ipv6_answer_is_connected_to_with_the_name_in_host(
    monkeypatch: pytest.MonkeyPatch, settings: Any, servers: list[Server]
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    server = _start(servers, "::1")  # the machines' loopback has IPv6 (the local Redis listens on ::1 too)
    Resolver(monkeypatch, NAME, ["::1"])
    assert _deliver(f"http://{NAME}:{server.port}/hook").status == WebhookDeliveryStatus.SUCCEEDED
    assert server.hosts == [f"{NAME}:{server.port}"]


def test_next_checked_address_is_tried_when_one_refuses_connections(
    monkeypatch: pytest.MonkeyPatch, settings: Any, servers: list[Server]
) -> None:
    """As a connection to the name would: nothing listens on the first answer's
    address (the server is bound to 127.0.0.1 only), the second one answers."""
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    server = _start(servers, "127.0.0.1")
    Resolver(monkeypatch, NAME, ["127.0.0.3", "127.0.0.1"])
    connections = Connections(monkeypatch)
    assert _deliver(f"http://{NAME}:{server.port}/hook").status == WebhookDeliveryStatus.SUCCEEDED
    assert [address for address, _ in connections.made] == ["127.0.0.3", "127.0.0.1"]
    assert server.hosts == [f"{NAME}:{server.port}"]


# --- https: SNI and the certificate are checked against the name ------------------


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)  # noqa: S603, S607 - fixed arguments


@pytest.fixture
def tls_files(tmp_path: Path) -> dict[str, Path]:
    """A throwaway CA and a certificate it signed for ``NAME`` only (no IP address)."""
    files = {k: tmp_path / f"{k}.pem" for k in ("ca", "ca_key", "leaf", "leaf_key", "csr")}
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(
        "req", "-x509", *ec, "-keyout", str(files["ca_key"]), "-out", str(files["ca"]), "-days", "2",
        "-subj", "/CN=messagecenter test CA",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    _openssl("req", *ec, "-keyout", str(files["leaf_key"]), "-out", str(files["csr"]), "-subj", f"/CN={NAME}")
    extensions = tmp_path / "leaf.ext"
    extensions.write_text(
        f"subjectAltName=DNS:{NAME}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n"
    )
    _openssl(
        "x509", "-req", "-in", str(files["csr"]), "-CA", str(files["ca"]), "-CAkey", str(files["ca_key"]),
        "-CAcreateserial", "-out", str(files["leaf"]), "-days", "2", "-extfile", str(extensions),
    )  # fmt: skip
    return files


def test_https_sends_the_name_in_sni_and_verifies_the_certificate_against_it(
    monkeypatch: pytest.MonkeyPatch, settings: Any, servers: list[Server], tls_files: dict[str, Path]
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    settings.WEBHOOK_CA_BUNDLE = str(tls_files["ca"])  # deliveries trust the test CA
    server_names: list[str | None] = []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls_files["leaf"], tls_files["leaf_key"])
    context.sni_callback = lambda _socket, name, _context: server_names.append(name)
    server = _start(servers, "127.0.0.1", tls=context)
    Resolver(monkeypatch, NAME, ["127.0.0.1"])

    delivery = _deliver(f"https://{NAME}:{server.port}/hook")

    assert (delivery.status, delivery.last_error) == (WebhookDeliveryStatus.SUCCEEDED, "")
    assert server_names == [NAME]
    assert server.hosts == [f"{NAME}:{server.port}"]

    # Another name on the same address: its certificate does not carry that
    # name, so nothing is sent (verification is against the name, not the IP).
    Resolver(monkeypatch, "other.example.test", ["127.0.0.1"])
    refused = _deliver(f"https://other.example.test:{server.port}/hook")
    assert refused.status == WebhookDeliveryStatus.PENDING
    assert "certificate" in refused.last_error.lower()
    assert server.hosts == [f"{NAME}:{server.port}"]
