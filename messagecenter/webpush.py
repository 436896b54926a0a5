"""Web Push on the wire: the VAPID key, subscription keys, and one push.

The standards do the work, through pywebpush (with http-ece and py-vapid):
each payload is encrypted for the subscription's browser key with
``aes128gcm`` (RFC 8291 on RFC 8188) and the request carries a VAPID JWT
signed with our key (RFC 8292: ``Authorization: vapid t=<jwt>, k=<key>``),
whose ``aud`` is the push service's origin. TTL, Urgency and Topic are RFC
8030's headers: the push service keeps an undelivered push for TTL seconds,
wakes a sleeping device according to Urgency, and replaces a waiting push of
the same Topic (a retry, or the same item pushed twice).

The key pair: ``MESSAGECENTER_VAPID_PRIVATE_KEY`` (base64url of the raw
32-byte key, or PEM), else the file ``MESSAGECENTER_VAPID_KEY_FILE`` (``make
run`` writes one with ``manage.py vapid_keys``), else one derived from
SECRET_KEY, so that every process of an installation that set neither agrees
on it (rotating SECRET_KEY then changes it, and every browser must subscribe
again: a deployment sets a key of its own).

Endpoints must be https. ``MESSAGECENTER_PUSH_ALLOW_LOCAL_ENDPOINTS`` (tests
only) also admits http and loopback or private addresses, where the tests'
own push service listens; otherwise the endpoint's host must resolve to
public addresses only (the webhooks' rule, ``webhooks.services``): a
subscription is whatever a browser (or a caller pretending to be one) sent,
and must not make this server POST inward. The rule is applied to the very
lookup each connection uses (``CheckedResolver``), so a name cannot answer
differently between a check and the connection.
"""

import asyncio
import base64
import binascii
import functools
import hashlib
import json
import os
import socket
import threading
import time
from collections.abc import Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from py_vapid import Vapid02
from pywebpush import WebPusher, WebPushException

from core.api.errors import ValidationFailed
from core.local_cache import LocalCache
from webhooks import services as webhooks

# The order of P-256 (a private scalar lies in [1, n - 1]).
_P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
# A VAPID JWT may live 24 hours (RFC 8292 section 2); one is reused for an hour
# per push service and made anew well before it expires.
_JWT_LIFETIME = 12 * 60 * 60
_JWT_REUSE = 60 * 60
MAX_ENDPOINT_LENGTH = 2000
URGENCIES = ("very-low", "low", "normal", "high")


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: object) -> bytes:
    """base64url with or without padding; raises ValueError for anything else."""
    if not isinstance(text, str) or not text or not text.isascii():
        raise ValueError("not base64url")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except binascii.Error as exc:
        raise ValueError("not base64url") from exc


# --- the VAPID key -------------------------------------------------------------------


def _derived_key() -> ec.EllipticCurvePrivateKey:
    material = HKDF(algorithm=SHA256(), length=48, salt=None, info=b"messagecenter vapid key").derive(
        settings.SECRET_KEY.encode()
    )
    return ec.derive_private_key(int.from_bytes(material, "big") % (_P256_ORDER - 1) + 1, ec.SECP256R1())


@functools.lru_cache(maxsize=4)
def _key_file_text(path: str, modified_ns: int) -> str:
    """The key file's text, read again only when the file changes (every push asks)."""
    return Path(path).read_text(encoding="ascii").strip()


def _configured_key_text() -> str:
    text = str(getattr(settings, "MESSAGECENTER_VAPID_PRIVATE_KEY", "") or "").strip()
    if text:
        return text
    path = str(getattr(settings, "MESSAGECENTER_VAPID_KEY_FILE", "") or "")
    try:
        return _key_file_text(path, os.stat(path).st_mtime_ns) if path else ""
    except FileNotFoundError:
        return ""


def _load_key(text: str) -> ec.EllipticCurvePrivateKey:
    if "-----BEGIN" in text:
        key = serialization.load_pem_private_key(text.encode(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
            raise ValueError("the VAPID key must be a P-256 key")
        return key
    raw = b64url_decode(text)
    if len(raw) != 32:
        raise ValueError("a raw VAPID key is 32 bytes (base64url)")
    return ec.derive_private_key(int.from_bytes(raw, "big"), ec.SECP256R1())


@dataclass(frozen=True)
class VapidKey:
    private: ec.EllipticCurvePrivateKey
    derived: bool  # from SECRET_KEY: nobody configured one

    @property
    def public_raw(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )

    @property
    def public_key(self) -> str:
        """The application server key browsers subscribe with (base64url, 65 bytes)."""
        return b64url(self.public_raw)

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(self.public_raw).hexdigest()[:16]


_key_lock = threading.Lock()  # one process derives or loads the key once
# The key pair of the configuration in use (a new one replaces it).
_keys: LocalCache[str, VapidKey] = LocalCache("vapid keys", maxsize=1)


def vapid_key() -> VapidKey:
    """The key pair in use (read once per configuration)."""
    text = _configured_key_text()
    cache_key = hashlib.sha256(f"{text}|{settings.SECRET_KEY}".encode()).hexdigest()
    with _key_lock:
        key = _keys.get(cache_key)
        if key is None:
            key = VapidKey(_load_key(text), derived=False) if text else VapidKey(_derived_key(), derived=True)
            _keys[cache_key] = key
        return key


def vapid_key_generate() -> str:
    """A new private key, base64url of its 32 raw bytes (MESSAGECENTER_VAPID_PRIVATE_KEY's form)."""
    key = ec.generate_private_key(ec.SECP256R1())
    return b64url(key.private_numbers().private_value.to_bytes(32, "big"))


def public_key_of(private_text: str) -> str:
    return VapidKey(_load_key(private_text), derived=False).public_key


# (key, push service, subject) -> (reuse until, headers).
_jwts: LocalCache[tuple[str, str, str], tuple[float, dict[str, str]]] = LocalCache("vapid jwts", maxsize=1000)


def _vapid_headers(origin: str) -> dict[str, str]:
    """The Authorization header for pushes to ``origin``: one signature per
    push service an hour, not one per push."""
    key = vapid_key()
    subject = str(settings.MESSAGECENTER_VAPID_SUBJECT)
    cache_key = (key.fingerprint, origin, subject)
    now = time.time()
    held = _jwts.get(cache_key)
    if held is not None and held[0] > now:
        return held[1]
    headers = Vapid02(private_key=key.private).sign({"aud": origin, "sub": subject, "exp": int(now) + _JWT_LIFETIME})
    _jwts[cache_key] = (now + _JWT_REUSE, dict(headers))
    return dict(headers)


# --- subscriptions -------------------------------------------------------------------


def _invalid(field: str, message: str) -> ValidationFailed:
    return ValidationFailed(message, code="invalid_subscription", fields={field: [message]})


def _local_allowed() -> bool:
    return bool(getattr(settings, "MESSAGECENTER_PUSH_ALLOW_LOCAL_ENDPOINTS", False))


def endpoint_check(endpoint: Any) -> str:
    """An https URL of at most MAX_ENDPOINT_LENGTH characters (http too where
    local endpoints are allowed); raises ValidationFailed on ``endpoint``."""
    if not isinstance(endpoint, str) or not endpoint or len(endpoint) > MAX_ENDPOINT_LENGTH:
        raise _invalid("endpoint", f"Give the push service's https URL (at most {MAX_ENDPOINT_LENGTH} characters).")
    try:
        parts = urlsplit(endpoint)
        host = parts.hostname
    except ValueError as exc:
        raise _invalid("endpoint", "Not a valid URL.") from exc
    schemes = ("https", "http") if _local_allowed() else ("https",)
    if parts.scheme not in schemes or not host or parts.username or parts.password or not endpoint.isascii():
        raise _invalid("endpoint", "The endpoint must be an https URL.")
    return endpoint


def keys_check(keys: Any) -> tuple[str, str]:
    """(p256dh, auth) when p256dh is a point on P-256 (uncompressed, 65 bytes)
    and auth 16 bytes, both base64url; raises ValidationFailed on ``keys``."""
    if not isinstance(keys, dict):
        raise _invalid("keys", "Give the subscription's keys: p256dh and auth.")
    p256dh, auth = keys.get("p256dh"), keys.get("auth")
    try:
        point = b64url_decode(p256dh)
        if len(point) != 65 or point[0] != 4:
            raise ValueError("not an uncompressed point")
        ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), point)  # refuses a point off the curve
    except (ValueError, TypeError) as exc:
        raise _invalid("keys", "p256dh must be a P-256 public key (base64url, uncompressed point).") from exc
    try:
        secret = b64url_decode(auth)
    except ValueError as exc:
        raise _invalid("keys", "auth must be 16 bytes, base64url.") from exc
    if len(secret) != 16:
        raise _invalid("keys", "auth must be 16 bytes, base64url.")
    return str(p256dh).rstrip("="), str(auth).rstrip("=")


# --- sending -------------------------------------------------------------------------


@dataclass(frozen=True)
class PushResult:
    status: int | None  # the push service's status code; None when none answered
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def gone(self) -> bool:
        """404 or 410: the subscription expired or was withdrawn; it is deleted."""
        return self.status in (404, 410)


@dataclass(frozen=True)
class Outgoing:
    """One push: where, for which browser keys, what, and RFC 8030's headers."""

    endpoint: str
    p256dh: str
    auth: str
    payload: dict[str, Any]
    ttl: int
    urgency: str
    topic: str


def _origin(endpoint: str) -> str:
    parts = urlsplit(endpoint)
    return f"{parts.scheme}://{parts.netloc}"


@functools.lru_cache(maxsize=256)
def _origin_refused(origin: str, bucket: int) -> str:
    """Why pushes to ``origin`` are refused now ("" when they are not). The
    answer is kept a minute (``bucket``): a fan-out asks once per push service."""
    try:
        webhooks.webhook_url_check(origin)
    except ValidationFailed as exc:
        return exc.message
    return ""


def _request(push: Outgoing) -> tuple[bytes, dict[str, str]]:
    """The encrypted body (pywebpush's RFC 8291 ``aes128gcm`` encoder, a fresh
    ephemeral key and salt each time) and the headers of one push."""
    subscription = {"endpoint": push.endpoint, "keys": {"p256dh": push.p256dh, "auth": push.auth}}
    data = json.dumps(push.payload, separators=(",", ":"), ensure_ascii=False).encode()
    body = WebPusher(subscription).encode(data, content_encoding="aes128gcm")["body"]
    headers = {
        **_vapid_headers(_origin(push.endpoint)),
        "Content-Encoding": "aes128gcm",
        "Content-Type": "application/octet-stream",
        "TTL": str(max(0, int(push.ttl))),
        "Urgency": push.urgency if push.urgency in URGENCIES else "normal",
        "Topic": push.topic[:32],
    }
    return bytes(body), headers


class CheckedResolver(AbstractResolver):
    """aiohttp's resolver for push services (its documented extension point):
    one lookup of the name, every address checked by the webhooks' rule
    (``webhooks.services.addresses_checked``), and the connection made to those
    addresses, so a name that answers a public address to a check and an inner
    one afterwards (DNS rebinding) never reaches inside. The Host header and
    the TLS server name stay the push service's name."""

    def __init__(self, *, allow_private: bool) -> None:
        self.allow_private = allow_private

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        lookup = functools.partial(webhooks.addresses_checked, host, port, allow_private=self.allow_private)
        try:
            addresses = await asyncio.get_running_loop().run_in_executor(None, lookup)
        except ValidationFailed as exc:
            raise OSError(exc.message) from exc
        results = []
        for address in addresses:
            kind = socket.AF_INET6 if ":" in address else socket.AF_INET
            if family in (socket.AF_INET, socket.AF_INET6) and kind != family:
                continue
            results.append(
                ResolveResult(hostname=host, host=address, port=port, family=kind, proto=0, flags=socket.AI_NUMERICHOST)
            )
        if not results:
            raise OSError(f"{host} has no address of the family asked for")
        return results

    async def close(self) -> None:
        return None


async def _post_all(pushes: Sequence[Outgoing], refused: dict[str, str]) -> list[PushResult]:
    """POST every push on one session (keep-alive connections to each push
    service), at most MESSAGECENTER_PUSH_CONCURRENCY at a time. No redirect is
    followed (a push service answers, it does not send us elsewhere) and no
    proxy from the environment is used: both would reach addresses out of
    sight of the check."""
    concurrency = max(1, int(settings.MESSAGECENTER_PUSH_CONCURRENCY))
    timeout = aiohttp.ClientTimeout(total=float(settings.MESSAGECENTER_PUSH_TIMEOUT_SECONDS))
    gate = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=concurrency, resolver=CheckedResolver(allow_private=_local_allowed()))
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False) as session:

        async def one(push: Outgoing) -> PushResult:
            reason = refused.get(_origin(push.endpoint), "")
            if reason:
                return PushResult(None, reason)
            async with gate:
                try:
                    body, headers = _request(push)
                    async with session.post(
                        push.endpoint, data=body, headers=headers, allow_redirects=False
                    ) as response:
                        if 200 <= response.status < 300:
                            return PushResult(response.status)
                        text = (await response.text(errors="replace"))[:300]
                        return PushResult(response.status, f"HTTP {response.status}: {text}")
                except (aiohttp.ClientError, TimeoutError, WebPushException, ValueError) as exc:
                    return PushResult(None, f"{type(exc).__name__}: {exc}"[:500])

        return list(await asyncio.gather(*(one(push) for push in pushes)))


def _run(coroutine: Coroutine[Any, Any, list[PushResult]]) -> list[PushResult]:
    """Run the sends' event loop here, or in a thread of its own when this
    thread already runs one (asyncio runs one loop per thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="webpush") as pool:
        return pool.submit(asyncio.run, coroutine).result()


def pushes_send(pushes: Sequence[Outgoing]) -> list[PushResult]:
    """Encrypt and POST each push once; results in the pushes' order. Pushes
    are mostly waits on the network, so they go out together from one event
    loop; endpoints whose host does not resolve to public addresses (unless
    local endpoints are allowed) are refused without a request."""
    if not pushes:
        return []
    refused: dict[str, str] = {}
    if not _local_allowed():
        bucket = int(time.time() // 60)
        refused = {origin: _origin_refused(origin, bucket) for origin in {_origin(p.endpoint) for p in pushes}}
    return _run(_post_all(pushes, refused))


def push_send(push: Outgoing) -> PushResult:
    """One push (a retry)."""
    return pushes_send([push])[0]
