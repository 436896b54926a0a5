"""Webhooks: operators' endpoints receive signed JSON POSTs for events.

Deliveries follow the Standard Webhooks convention (``webhook-id``,
``webhook-timestamp``, ``webhook-signature`` headers; HMAC-SHA256 with a
``whsec_`` secret), signed by the ``standardwebhooks`` library.

Durability: ``webhook_emit`` writes one ``WebhookDelivery`` row per endpoint
in the transaction of the event itself (an outbox). Only after commit is the
row handed to Celery; a broker or Redis that is down loses nothing, since the
beat relay (``webhook_relay``) hands due rows over again. A row handed over
is leased (``WEBHOOK_LEASE_SECONDS``) so two relays do not send it twice; a
receiver may still see an event twice after a worker died mid-request, and
drops the duplicate by its ``webhook-id``, which every attempt repeats.

A failed attempt (connection error, timeout, non-2xx) is due again after the
next of ``WEBHOOK_RETRY_DELAYS``; after the last the delivery is failed. An
endpoint whose attempts failed ``WEBHOOK_DISABLE_AFTER_FAILURES`` times in a
row is switched off (its pending deliveries fail with it).

Server-side request forgery: only http(s) URLs, and unless
``WEBHOOK_ALLOW_PRIVATE_ADDRESSES`` no host that resolves to a loopback,
private, link-local, multicast, reserved or unspecified address (IPv4 or IPv6,
nor an IPv6 form that carries such an IPv4 address), checked at registration
and again before every attempt. An attempt resolves the name once, refuses it
if any of its addresses is refused, and connects to an address it checked, not
to the name: a resolver that answers a public address to the check and an
inner one to the connection (DNS rebinding) gets nowhere. The receiver still
sees its own name in the Host header and, over https, in SNI and the
certificate check. Redirects are not followed.

``core`` knows no app: the apps call ``webhook_emit`` with their own events.
"""

import base64
import ipaddress
import json
import logging
import secrets
import socket
import ssl
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

import httpx
from celery import current_app
from django.conf import settings
from django.db import connections, router, transaction
from django.db.models import F, Model
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerError
from standardwebhooks.webhooks import Webhook

from core.api.errors import ValidationFailed
from core.api.pagination import KeysetPage, keyset_page
from insight import metrics
from webhooks.models import WebhookDelivery, WebhookDeliveryStatus, WebhookEndpoint

logger = logging.getLogger(__name__)

EVENTS: tuple[str, ...] = (
    "message.sent",
    "message.read",
    "announcement.published",
    "bulletin.published",
    "notification.sent",
    "delivery.failed",
    "message.responded",
)
DELIVER_TASK = "core.webhook_deliver"
MAX_RESPONSE_ERROR = 500


# --- Validation ------------------------------------------------------------------


def _invalid(field: str, message: str, code: str = "invalid") -> ValidationFailed:
    return ValidationFailed(message, code=code, fields={field: [message]})


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Where IPv6 reaches the open internet; everything outside it (loopback,
# unspecified, unique-local, link-local, site-local, multicast, the old
# IPv4-compatible ::a.b.c.d, NAT64's local-use prefix...) is refused whole.
_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")
# NAT64's well-known prefix lies outside it: a translator on the path forwards
# such an address to the IPv4 address in its last 32 bits, judged as that.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def _ipv4_refused(ip: ipaddress.IPv4Address) -> bool:
    # is_global alone lets multicast through (224.0.0.0/4 is not "private").
    return not ip.is_global or ip.is_multicast or ip.is_reserved or ip.is_unspecified


def _address_refused(ip: IPAddress) -> bool:
    """Whether connecting to ``ip`` may reach the machine itself or a network
    that is not the public internet, directly or through an IPv4 address
    carried inside an IPv6 one."""
    if isinstance(ip, ipaddress.IPv4Address):
        return _ipv4_refused(ip)
    if ip.ipv4_mapped is not None:  # a dual-stack socket connects to the IPv4 address itself
        return _ipv4_refused(ip.ipv4_mapped)
    if ip in _NAT64:
        return _ipv4_refused(ipaddress.IPv4Address(int(ip) & 0xFFFF_FFFF))
    if ip.sixtofour is not None and _ipv4_refused(ip.sixtofour):  # a 6to4 relay forwards to it
        return True
    if ip.teredo is not None:  # the tunnel's server and client are IPv4 addresses we cannot vouch for
        return True
    return ip not in _GLOBAL_UNICAST or not ip.is_global or ip.is_multicast or ip.is_reserved


def _parse(url: str) -> httpx.URL:
    """The URL as httpx reads it: what is checked is what is connected to, so
    one parser decides both (two could disagree on which part is the host)."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise _invalid("url", "Enter a valid URL.", "invalid_url") from exc
    if parsed.scheme not in ("http", "https"):
        raise _invalid("url", "Only http and https URLs are allowed.", "invalid_url")
    if not parsed.raw_host:
        raise _invalid("url", "The URL has no host.", "invalid_url")
    if parsed.userinfo:
        raise _invalid("url", "Credentials in the URL are not allowed.", "invalid_url")
    return parsed


def addresses_checked(host: str, port: int, *, allow_private: bool) -> list[str]:
    """Every address ``host`` resolves to, in the resolver's order, looked up
    once. Unless ``allow_private``, refuses the host when any of them is not
    public: a name that mixes a public address with an inner one could be
    answered with either. The caller connects to these addresses and never
    looks the name up again. Raises ValidationFailed on ``url``."""
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError, ValueError) as exc:
        raise _invalid("url", "The host does not resolve.", "invalid_url") from exc
    # A name answers each address once per socket type; keep the first of each.
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses:
        raise _invalid("url", "The host does not resolve.", "invalid_url")
    if not allow_private and any(
        # A link-local IPv6 answer carries its interface ("fe80::1%eth0").
        _address_refused(ipaddress.ip_address(address.split("%", 1)[0]))
        for address in addresses
    ):
        raise _invalid("url", "The host resolves to a private or reserved address.", "invalid_url")
    return addresses


def _resolve(parsed: httpx.URL) -> list[str]:
    """The checked addresses of a webhook URL's host (``addresses_checked``)."""
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        host = parsed.raw_host.decode("ascii")
    except UnicodeError as exc:
        raise _invalid("url", "The host does not resolve.", "invalid_url") from exc
    return addresses_checked(host, port, allow_private=settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES)


def webhook_url_check(url: str) -> None:
    """Refuse what is not an http(s) URL, and (unless allowed) a host that
    resolves to a non-public address. Raises ValidationFailed on ``url``.

    Passing says the name is acceptable now; it may resolve elsewhere later,
    so every attempt checks again and connects only to what it checked."""
    parsed = _parse(url)
    if settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES:
        return  # any address will do: no lookup, a receiver that is not up yet may be registered
    _resolve(parsed)


def _events(events: Any) -> list[str]:
    if not isinstance(events, list) or not events:
        raise _invalid("events", "Choose at least one event.")
    unknown = sorted({str(e) for e in events} - set(EVENTS))
    if unknown:
        raise _invalid("events", f"Unknown event(s): {', '.join(unknown)}.", "unknown_event")
    return sorted(set(events))


def webhook_secret_new() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


# --- Endpoints -------------------------------------------------------------------


def webhook_endpoint_create(
    *, url: str, events: list[str], description: str = "", active: bool = True
) -> WebhookEndpoint:
    clean_events = _events(events)  # the cheap check first: no DNS lookup for a request refused anyway
    webhook_url_check(url)
    return WebhookEndpoint.objects.create(
        url=url, events=clean_events, description=description, active=active, secret=webhook_secret_new()
    )


def webhook_endpoint_update(*, endpoint: WebhookEndpoint, data: Mapping[str, Any]) -> WebhookEndpoint:
    """Change url, events, description or active; turning an endpoint on again
    forgets its failures. Validates everything before writing."""
    events = _events(data["events"]) if "events" in data else endpoint.events
    if "url" in data:
        webhook_url_check(data["url"])
        endpoint.url = data["url"]
    endpoint.events = events
    if "description" in data:
        endpoint.description = data["description"]
    if "active" in data:
        if data["active"] and not endpoint.active:
            endpoint.consecutive_failures = 0
            endpoint.disabled_at = None
        endpoint.active = bool(data["active"])
    endpoint.save()
    return endpoint


def webhook_endpoint_delete(*, endpoint: WebhookEndpoint) -> None:
    endpoint.delete()


# --- Emitting --------------------------------------------------------------------


def _lease_end(now: datetime | None = None) -> datetime:
    return (now or timezone.now()) + timedelta(seconds=float(settings.WEBHOOK_LEASE_SECONDS))


def webhook_endpoint_list(*, limit: int, cursor: str | None) -> KeysetPage[WebhookEndpoint]:
    """Endpoints newest first, a keyset page (``core.api.pagination.keyset_page``)."""
    return keyset_page(WebhookEndpoint.objects.all(), limit=limit, cursor=cursor, scope="manage-webhooks")


# Every publish asks which endpoints want its event, in its transaction: as
# one plain statement, since the ORM's query (built, compiled, rows made into
# model instances) cost twice the round trip itself. Few endpoints: their
# event lists are filtered here, which works on every database.
_ACTIVE_ENDPOINTS_SQL = "SELECT id, events FROM {table} WHERE active"


def _endpoints_wanting(event: str) -> list[int]:
    """Ids of the active endpoints that want ``event``."""
    connection = connections[router.db_for_write(WebhookEndpoint)]
    with connection.cursor() as cursor:
        cursor.execute(_ACTIVE_ENDPOINTS_SQL.format(table=connection.ops.quote_name(WebhookEndpoint._meta.db_table)))
        rows = cursor.fetchall()
    # JSON arrives as text (Django leaves decoding to the field, on PostgreSQL too).
    return [pk for pk, events in rows if event in (json.loads(events) if isinstance(events, str) else events)]


def webhook_wanted(event: str) -> bool:
    """Whether an active endpoint wants ``event`` (callers skip building a payload otherwise)."""
    return bool(_endpoints_wanting(event))


def webhook_emit(*, event: str, data: Mapping[str, Any], at: datetime | None = None) -> list[WebhookDelivery]:
    """Record ``event`` for every active endpoint that wants it, in the caller's
    transaction; each row goes to Celery after commit. One indexed query when
    no endpoint is registered."""
    if event not in EVENTS:
        raise ValueError(f"Unknown webhook event {event!r}.")
    endpoints = _endpoints_wanting(event)
    if not endpoints:
        return []
    now = timezone.now()
    payload = {"type": event, "timestamp": (at or now).isoformat(), "data": dict(data)}
    rows = WebhookDelivery.objects.bulk_create(
        [
            WebhookDelivery(
                endpoint_id=endpoint,
                event=event,
                message_id=f"msg_{uuid.uuid4().hex}",
                payload=payload,
                # Leased from the start: the relay leaves it to the hand-over
                # below, and finds it if this process dies first.
                next_attempt_at=_lease_end(now),
            )
            for endpoint in endpoints
        ]
    )
    ids = [row.pk for row in rows if row.pk is not None]
    if not ids:  # a backend that does not return ids from bulk inserts
        ids = list(
            WebhookDelivery.objects.filter(message_id__in=[r.message_id for r in rows]).values_list("pk", flat=True)
        )
    transaction.on_commit(lambda: _hand_over(ids))
    return rows


def _hand_over(ids: Iterable[int], task: str = DELIVER_TASK) -> None:
    for delivery_id in ids:
        try:
            current_app.tasks[task].apply_async(args=[delivery_id], retry=False)
        except (BrokerError, OSError) as exc:
            # The row stays due with its lease; the relay hands it over then.
            logger.warning("broker refused delivery %s of %s: %s", delivery_id, task, exc)
            return


# --- Delivering ------------------------------------------------------------------


def _retry_delays() -> list[float]:
    return [float(d) for d in settings.WEBHOOK_RETRY_DELAYS]


def retry_delay(*, attempts: int) -> float | None:
    """Seconds from a failed attempt (the ``attempts``-th) to the next one
    (``WEBHOOK_RETRY_DELAYS``); None once the delays are spent (give up)."""
    delays = _retry_delays()
    return delays[attempts - 1] if 1 <= attempts <= len(delays) else None


def _signed_request(delivery: WebhookDelivery, body: str) -> dict[str, str]:
    now = timezone.now()
    signature = Webhook(delivery.endpoint.secret).sign(msg_id=delivery.message_id, timestamp=now, data=body)
    return {
        "content-type": "application/json",
        "user-agent": "messagecenter-webhooks",
        "webhook-id": delivery.message_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signature,
    }


def _verify() -> ssl.SSLContext | bool:
    """How receivers' certificates are checked: the operator's CA bundle, else httpx's default."""
    bundle = settings.WEBHOOK_CA_BUNDLE
    return ssl.create_default_context(cafile=bundle) if bundle else True


def _post_to(target: httpx.URL, address: str, body: str, headers: dict[str, str]) -> httpx.Response:
    """POST to ``address`` itself rather than to the name, so that no second
    lookup can choose where the request goes. The receiver still sees its
    name: in the Host header, and over https as the SNI name, which httpcore
    also hands to the TLS handshake as the name the certificate must carry."""
    # No proxy from the environment (trust_env): a proxy would look the name
    # up again itself, out of reach of the check.
    with httpx.Client(
        timeout=float(settings.WEBHOOK_TIMEOUT_SECONDS), follow_redirects=False, trust_env=False, verify=_verify()
    ) as client:
        return client.post(
            target.copy_with(host=address),  # httpx puts an IPv6 address in brackets
            content=body.encode(),
            headers={**headers, "host": target.netloc.decode("ascii")},
            extensions={"sni_hostname": target.raw_host.decode("ascii")},
        )


def _post(delivery: WebhookDelivery) -> tuple[int | None, str]:
    """One attempt: (status code or None, error text; empty on a 2xx)."""
    try:
        target = _parse(delivery.endpoint.url)
        addresses = _resolve(target)
    except ValidationFailed as exc:
        return None, exc.message
    body = json.dumps(delivery.payload, separators=(",", ":"))
    headers = _signed_request(delivery, body)
    error = ""
    for address in addresses:
        try:
            response = _post_to(target, address, body, headers)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            # Nothing was sent: the next checked address may answer (as a
            # connection to the name would try them in turn).
            error = f"{type(exc).__name__}: {exc}"[:MAX_RESPONSE_ERROR]
            continue
        except httpx.HTTPError as exc:
            return None, f"{type(exc).__name__}: {exc}"[:MAX_RESPONSE_ERROR]
        if 200 <= response.status_code < 300:
            return response.status_code, ""
        return response.status_code, f"HTTP {response.status_code}: {response.text[:MAX_RESPONSE_ERROR]}"
    return None, error


def webhook_deliver(*, delivery_id: int) -> str:
    """One attempt of a pending delivery (the Celery task's body). Returns the
    status after it. Running it for a finished delivery changes nothing."""
    delivery = WebhookDelivery.objects.select_related("endpoint").filter(pk=delivery_id).first()
    if delivery is None or delivery.status != WebhookDeliveryStatus.PENDING:
        return "gone" if delivery is None else delivery.status
    if not delivery.endpoint.active:
        _finish(delivery, WebhookDeliveryStatus.FAILED, attempted=False, error="The endpoint is disabled.")
        return WebhookDeliveryStatus.FAILED
    code, error = _post(delivery)
    if not error:
        _finish(delivery, WebhookDeliveryStatus.SUCCEEDED, attempted=True, code=code)
        WebhookEndpoint.objects.filter(pk=delivery.endpoint_id).update(consecutive_failures=0)
        return WebhookDeliveryStatus.SUCCEEDED
    return _record_failure(delivery, code, error)


def _finish(
    delivery: WebhookDelivery, status: str, *, attempted: bool, code: int | None = None, error: str = ""
) -> None:
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        status=status,
        attempts=F("attempts") + (1 if attempted else 0),
        last_status_code=code,
        last_error=error,
        finished_at=timezone.now(),
    )


def _record_failure(delivery: WebhookDelivery, code: int | None, error: str) -> str:
    metrics.WEBHOOK_FAILURES.labels(event=delivery.event).inc()
    attempts = delivery.attempts + 1
    delays = _retry_delays()
    now = timezone.now()
    with transaction.atomic():
        if attempts > len(delays):
            status = WebhookDeliveryStatus.FAILED
            WebhookDelivery.objects.filter(pk=delivery.pk).update(
                status=status, attempts=attempts, last_status_code=code, last_error=error, finished_at=now
            )
        else:
            status = WebhookDeliveryStatus.PENDING
            WebhookDelivery.objects.filter(pk=delivery.pk).update(
                attempts=attempts,
                last_status_code=code,
                last_error=error,
                next_attempt_at=now + timedelta(seconds=delays[attempts - 1]),
            )
        endpoint = WebhookEndpoint.objects.select_for_update().get(pk=delivery.endpoint_id)
        endpoint.consecutive_failures += 1
        if endpoint.active and endpoint.consecutive_failures >= int(settings.WEBHOOK_DISABLE_AFTER_FAILURES):
            endpoint.active = False
            endpoint.disabled_at = now
            WebhookDelivery.objects.filter(endpoint=endpoint, status=WebhookDeliveryStatus.PENDING).update(
                status=WebhookDeliveryStatus.FAILED, finished_at=now, last_error="The endpoint was disabled."
            )
            logger.warning("webhook endpoint %s disabled after %s failures", endpoint.pk, endpoint.consecutive_failures)
        endpoint.save(update_fields=["consecutive_failures", "active", "disabled_at"])
    return status


def webhook_relay(*, limit: int = 100) -> int:
    """Hand due pending deliveries (retries, hand-overs the broker refused or
    lost) to Celery, leasing them first so two relays do not send one twice.
    Returns how many were handed over."""
    return deliveries_relay(model=WebhookDelivery, task=DELIVER_TASK, limit=limit)


def deliveries_relay(*, model: type[Model], task: str, limit: int = 100) -> int:
    """The relay for any model of ``WebhookDelivery``'s shape (``status``,
    ``next_attempt_at``): an app's own outgoing deliveries (Web Push) are
    retried by the same mechanism, each row handed to ``task`` by id."""
    now = timezone.now()
    rows = model._default_manager
    with transaction.atomic():
        ids = list(
            rows.filter(status=WebhookDeliveryStatus.PENDING, next_attempt_at__lte=now)
            .order_by("next_attempt_at", "id")
            .select_for_update(skip_locked=True)
            .values_list("pk", flat=True)[:limit]
        )
        if not ids:
            return 0
        rows.filter(pk__in=ids).update(next_attempt_at=_lease_end(now))
    _hand_over(ids, task)
    return len(ids)


def webhook_retry(*, ids: Iterable[int]) -> int:
    """An operator's retry: make these deliveries pending and due now (their
    attempts start again); the relay sends them. Returns how many."""
    return WebhookDelivery.objects.filter(pk__in=list(ids)).update(
        status=WebhookDeliveryStatus.PENDING, attempts=0, next_attempt_at=timezone.now(), finished_at=None
    )


# --- Reading ---------------------------------------------------------------------


def webhook_pending_count() -> int:
    return WebhookDelivery.objects.filter(status=WebhookDeliveryStatus.PENDING).count()
