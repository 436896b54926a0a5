"""A Web Push service on 127.0.0.1 for the tests: it does what a browser's
push service and the browser do with a push, independently of our code.

Each push is checked the way RFC 8292 says a push service checks it (the
``Authorization: vapid t=<JWT>, k=<key>`` header: the ES256 signature
verified against ``k`` with ``cryptography``, ``aud`` the endpoint's origin,
``exp`` in the future and within 24 hours, ``sub`` a mailto: or https: URL)
and decrypted the way the browser decrypts it (RFC 8291 ``aes128gcm``, with
the subscription's own private key and auth secret, by ``http_ece``). The
service answers each endpoint from a script of status codes (201, 410,
500, ...), the last one repeating.

The endpoints are ``http://127.0.0.1:<port>/push/<name>``: a plain-HTTP
loopback server is the simplest real push service a test can run, so the
tests turn on ``MESSAGECENTER_PUSH_ALLOW_LOCAL_ENDPOINTS`` (off by default:
real endpoints must be https on public addresses).
"""

import base64
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import http_ece
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class Browser:
    """One browser's subscription keys (what PushManager.subscribe makes)."""

    name: str
    private: ec.EllipticCurvePrivateKey = field(default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    auth: bytes = field(default_factory=lambda: os.urandom(16))

    @property
    def p256dh(self) -> str:
        raw = self.private.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return b64url(raw)


@dataclass
class Received:
    name: str
    headers: dict[str, str]
    payload: dict[str, Any] | None  # decrypted JSON, or None when it could not be
    claims: dict[str, Any] | None  # the VAPID JWT's claims, or None when refused
    vapid_key: str  # the k= of the Authorization header
    error: str = ""


class PushService:
    def __init__(self) -> None:
        self.browsers: dict[str, Browser] = {}
        self.scripts: dict[str, list[int]] = {}
        self.received: list[Received] = []
        self.lock = threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status = service.handle(self.path, dict(self.headers.items()), body)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.origin = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def browser(self, name: str, *script: int) -> Browser:
        """A browser whose endpoint answers ``script`` in turn (the last repeats; default 201)."""
        browser = Browser(name)
        self.browsers[name] = browser
        self.scripts[name] = list(script) or [201]
        return browser

    def endpoint(self, name: str) -> str:
        return f"{self.origin}/push/{name}"

    def subscription(self, name: str) -> dict[str, Any]:
        """The browser's PushSubscription.toJSON()."""
        browser = self.browsers[name]
        return {
            "endpoint": self.endpoint(name),
            "expirationTime": None,
            "keys": {"p256dh": browser.p256dh, "auth": b64url(browser.auth)},
        }

    def to(self, name: str) -> list[Received]:
        return [r for r in self.received if r.name == name]

    def handle(self, path: str, headers: dict[str, str], body: bytes) -> int:
        name = path.rsplit("/", 1)[-1]
        lower = {k.lower(): v for k, v in headers.items()}
        browser = self.browsers.get(name)
        received = Received(name=name, headers=lower, payload=None, claims=None, vapid_key="")
        try:
            received.claims, received.vapid_key = self._vapid(lower.get("authorization", ""))
            if browser is None:
                raise ValueError("no such subscription")
            if lower.get("content-encoding") != "aes128gcm":
                raise ValueError(f"content-encoding {lower.get('content-encoding')!r}")
            plain = http_ece.decrypt(body, private_key=browser.private, auth_secret=browser.auth, version="aes128gcm")
            received.payload = json.loads(plain)
        except Exception as exc:  # a refused push is recorded with its reason
            received.error = f"{type(exc).__name__}: {exc}"
        with self.lock:
            self.received.append(received)
            script = self.scripts.get(name, [404])
            status = script.pop(0) if len(script) > 1 else script[0]
        if received.error:
            return 400 if browser is not None else 404
        return status

    def _vapid(self, header: str) -> tuple[dict[str, Any], str]:
        """RFC 8292: ``vapid t=<jwt>, k=<key>``; the JWT checked against k."""
        scheme, _, params = header.partition(" ")
        if scheme.lower() != "vapid":
            raise ValueError(f"not a vapid Authorization header: {header[:40]!r}")
        parts = dict(p.strip().split("=", 1) for p in params.split(","))
        token, key = parts["t"], parts["k"]
        head, claims_part, signature = token.split(".")
        if json.loads(unb64url(head)) != {"typ": "JWT", "alg": "ES256"}:
            raise ValueError("not an ES256 JWT")
        public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), unb64url(key))
        raw = unb64url(signature)
        if len(raw) != 64:
            raise ValueError("an ES256 signature is 64 bytes")
        der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
        try:
            public.verify(der, f"{head}.{claims_part}".encode(), ec.ECDSA(hashes.SHA256()))
        except InvalidSignature as exc:
            raise ValueError("the VAPID signature does not verify") from exc
        claims = json.loads(unb64url(claims_part))
        now = time.time()
        if claims.get("aud") != self.origin:
            raise ValueError(f"aud {claims.get('aud')!r} is not {self.origin!r}")
        if not now < int(claims["exp"]) <= now + 24 * 60 * 60:
            raise ValueError("exp is not within the next 24 hours")
        if not str(claims.get("sub", "")).startswith(("mailto:", "https:")):
            raise ValueError("sub is not a mailto: or https: URL")
        return claims, key

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def serve_push(settings: Any) -> Iterator[PushService]:
    """A test module's fixture body: ``yield from serve_push(settings)``."""
    settings.MESSAGECENTER_PUSH_ALLOW_LOCAL_ENDPOINTS = True
    settings.MESSAGECENTER_VAPID_SUBJECT = "mailto:ops@example.org"
    service = PushService()
    try:
        yield service
    finally:
        service.stop()
