"""Web Push delivered for real: subscriptions saved through the API, items
sent through the manage API, and a local push service (tests/messagecenter/
push_service.py) that verifies each push's VAPID JWT against our public key
and decrypts its ``aes128gcm`` body with the subscription's private key.
404/410 delete the subscription; 500 is retried through the webhooks'
delivery rows and relay, with their delays; nothing goes out for an item
read, archived, muted or retracted first, nor to a category the user turned
pushes off for; quiet hours hold pushes for one summary; the hourly cap
defers the rest."""

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from prometheus_client import REGISTRY

from messagecenter import services
from messagecenter.models import ChannelHold, ItemChannels, Message, PushDelivery, PushSubscription
from messagecenter.services.channels.push import channel_push_chunk
from tests.conftest import client_for
from tests.messagecenter.push_service import PushService, serve_push

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def push_service(settings: Any) -> Iterator[PushService]:
    yield from serve_push(settings)


MESSAGES = "/api/v1/manage/messages/"
SUBSCRIPTIONS = "/api/v1/me/push-subscriptions/"
START = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)


def subscribe(user: Any, service: PushService, name: str, *script: int) -> str:
    service.browser(name, *script)
    response = client_for(user).post(SUBSCRIPTIONS, service.subscription(name), format="json")
    assert response.status_code == 201, response.content
    return str(response.json()["id"])


def send(operator_client: Any, *users: Any, category: str = "transaction", title: str = "Order 42 shipped") -> str:
    response = operator_client.post(
        MESSAGES,
        {
            "category": category,
            "title": title,
            "summary": "It leaves the warehouse today.",
            "body_html": "<p>Tracking inside.</p>",
            "to": {"users": [u.pk for u in users]},
            "channels": {"web_push": True},
        },
        format="json",
    )
    assert response.status_code == 202, response.content
    return str(response.json()["id"])


def counts(operator_client: Any, message_id: str) -> dict[str, Any]:
    response = operator_client.get(f"{MESSAGES}{message_id}/")
    assert response.status_code == 200, response.content
    return dict(response.json()["channels"]["web_push"])


def sent_total(outcome: str) -> float:
    return (
        REGISTRY.get_sample_value("messagecenter_channel_deliveries_total", {"channel": "web_push", "outcome": outcome})
        or 0.0
    )


def test_aes128gcm_push_is_encrypted_for_the_browser_and_vapid_signed(
    push_service: PushService,
    operator_client: Any,
    anon_client: Any,
    recipient: Any,
) -> None:
    laptop = subscribe(recipient, push_service, "laptop")
    phone = subscribe(recipient, push_service, "phone")
    before = sent_total("sent")
    message_id = send(operator_client, recipient)

    key = anon_client.get("/api/v1/push/public-key/").json()["public_key"]
    for name in ("laptop", "phone"):
        (push,) = push_service.to(name)
        assert push.error == "", push.error
        # Decrypted with the browser's own key: the payload the service worker shows.
        assert push.payload == {
            "id": f"m{message_id}",
            "title": "Order 42 shipped",
            "summary": "It leaves the warehouse today.",
            "url": f"/inbox/m{message_id}/",
        }
        # Signed with the key browsers subscribed with, for this push service, by whom.
        assert push.vapid_key == key
        assert push.claims is not None
        assert push.claims["aud"] == push_service.origin
        assert push.claims["sub"] == "mailto:ops@example.org"
        # RFC 8030: kept up to a day for an offline device; a transaction wakes it.
        assert push.headers["ttl"] == "86400"
        assert push.headers["urgency"] == "high"
        assert push.headers["topic"] == f"m{message_id}"
    assert counts(operator_client, message_id) == {"sent": 2, "failed": 0}
    assert sent_total("sent") - before == 2
    assert {laptop, phone} == {str(pk) for pk in PushSubscription.objects.values_list("pk", flat=True)}


def test_aes128gcm_push_answered_410_or_404_deletes_the_subscription(
    push_service: PushService,
    operator_client: Any,
    recipient: Any,
    other_recipient: Any,
) -> None:
    subscribe(recipient, push_service, "gone", 410)
    subscribe(other_recipient, push_service, "unknown", 404)
    kept = subscribe(other_recipient, push_service, "fine")
    message_id = send(operator_client, recipient, other_recipient)

    assert [p.error for p in push_service.received] == ["", "", ""]
    assert [str(pk) for pk in PushSubscription.objects.values_list("pk", flat=True)] == [kept]
    assert counts(operator_client, message_id) == {"sent": 1, "failed": 2}
    assert not PushDelivery.objects.exists()  # nothing to retry: they are gone for good


def test_aes128gcm_push_answered_500_is_retried_with_the_webhooks_delays(
    push_service: PushService,
    operator_client: Any,
    recipient: Any,
    settings: Any,
) -> None:
    settings.WEBHOOK_RETRY_DELAYS = [10.0, 60.0]
    subscribe(recipient, push_service, "flaky", 500, 500, 201)
    with time_machine.travel(START, tick=False) as clock:
        message_id = send(operator_client, recipient)
        (retry,) = PushDelivery.objects.all()
        assert (retry.status, retry.attempts, retry.last_status_code) == ("pending", 1, 500)
        assert retry.next_attempt_at == START + timedelta(seconds=10)
        # Not due yet: the relay hands nothing over.
        assert services.push_relay() == 0
        clock.shift(timedelta(seconds=10))
        assert services.push_relay() == 1  # eager Celery: the attempt runs now, 500 again
        retry.refresh_from_db()
        assert (retry.status, retry.attempts) == ("pending", 2)
        assert retry.next_attempt_at == START + timedelta(seconds=70)
        clock.shift(timedelta(seconds=60))
        assert services.push_relay() == 1
        retry.refresh_from_db()
        assert (retry.status, retry.attempts, retry.last_status_code) == ("succeeded", 3, 201)
    pushes = push_service.to("flaky")
    assert len(pushes) == 3
    assert all(p.error == "" and p.payload is not None and p.payload["id"] == f"m{message_id}" for p in pushes)
    assert counts(operator_client, message_id) == {"sent": 1, "failed": 0}


def test_retries_are_given_up_after_the_last_delay(
    push_service: PushService,
    operator_client: Any,
    recipient: Any,
    settings: Any,
) -> None:
    settings.WEBHOOK_RETRY_DELAYS = [10.0]
    subscribe(recipient, push_service, "down", 503)
    with time_machine.travel(START, tick=False) as clock:
        message_id = send(operator_client, recipient)
        clock.shift(timedelta(seconds=11))
        assert services.push_relay() == 1
    (retry,) = PushDelivery.objects.all()
    assert (retry.status, retry.attempts, retry.last_status_code) == ("failed", 2, 503)
    assert counts(operator_client, message_id) == {"sent": 0, "failed": 1}


def test_a_retry_is_not_sent_once_the_user_read_the_item(
    push_service: PushService,
    operator_client: Any,
    recipient: Any,
    settings: Any,
) -> None:
    settings.WEBHOOK_RETRY_DELAYS = [10.0]
    subscribe(recipient, push_service, "flaky", 500, 201)
    with time_machine.travel(START, tick=False) as clock:
        message_id = send(operator_client, recipient)
        services.inbox_mark_read(user=recipient, item_id=f"m{message_id}")
        clock.shift(timedelta(seconds=10))
        assert services.push_relay() == 1
    assert len(push_service.to("flaky")) == 1  # the first attempt only
    (retry,) = PushDelivery.objects.all()
    assert retry.status == "failed"
    assert retry.last_error.startswith("Not sent: ")
    assert counts(operator_client, message_id) == {"sent": 0, "failed": 0}


def test_no_push_for_a_muted_category_a_category_turned_off_or_without_web_push(
    push_service: PushService,
    operator_client: Any,
    recipient: Any,
    other_recipient: Any,
    outsider: Any,
) -> None:
    subscribe(recipient, push_service, "muted")
    subscribe(other_recipient, push_service, "off")
    subscribe(outsider, push_service, "nothing-for-me")
    services.preferences_update(user=recipient, muted_categories=["promotion"])
    services.preferences_update(user=other_recipient, channels={"promotion": {"web_push": False}})
    message_id = send(operator_client, recipient, other_recipient, category="promotion")
    # Pushes stay off unless the create asks for them.
    response = operator_client.post(
        MESSAGES,
        {"category": "system", "title": "Quiet", "body_html": "", "to": {"users": [recipient.pk]}},
        format="json",
    )
    assert response.status_code == 202
    assert push_service.received == []
    assert counts(operator_client, message_id) == {"sent": 0, "failed": 0}
    read = operator_client.get(f"{MESSAGES}{response.json()['id']}/").json()
    assert read["channels"]["web_push"] == {"sent": 0, "failed": 0}
    assert read["channels_requested"] == {"web_push": False, "email_if_unread_after_seconds": None}


def test_no_push_for_a_retracted_message_nor_one_archived_before_the_chunk_ran(
    push_service: PushService,
    operator_client: Any,
    recipient: Any,
    other_recipient: Any,
) -> None:
    subscribe(recipient, push_service, "a")
    subscribe(other_recipient, push_service, "b")
    message = services.message_send(
        sender=None,
        category="system",
        title="Later",
        body_html="",
        user_ids=[recipient.pk, other_recipient.pk],
    )
    channels = ItemChannels.objects.create(
        item_id=message.ref, category="system", web_push=True, created_at=message.created_at
    )
    services.inbox_archive(user=recipient, item_id=message.ref)
    assert channel_push_chunk(channels=channels, index=0) == 1
    assert [p.name for p in push_service.received] == ["b"]
    services.message_retract(message=Message.objects.get(pk=message.pk))
    assert channel_push_chunk(channels=channels, index=0) == 0
    assert len(push_service.received) == 1


def test_the_hourly_cap_defers_the_rest(
    push_service: PushService,
    operator_client: Any,
    recipient: Any,
    settings: Any,
) -> None:
    settings.MESSAGECENTER_CHANNEL_MAX_PER_HOUR = 2
    subscribe(recipient, push_service, "busy")
    before = sent_total("deferred")
    with time_machine.travel(START, tick=False) as clock:
        for n in range(3):
            send(operator_client, recipient, title=f"Update {n}")
        assert [p.payload["title"] for p in push_service.to("busy") if p.payload] == ["Update 0", "Update 1"]
        assert sent_total("deferred") - before == 1
        # A new hour: pushes go out again.
        clock.shift(timedelta(hours=1))
        send(operator_client, recipient, title="Update 3")
    assert len(push_service.to("busy")) == 3


def test_quiet_hours_hold_pushes_for_one_summary_when_they_end(
    push_service: PushService,
    operator_client: Any,
    recipient: Any,
    other_recipient: Any,
) -> None:
    subscribe(recipient, push_service, "night")
    subscribe(other_recipient, push_service, "day")
    quiet = {"start": "22:00", "end": "07:00", "timezone": "Europe/Berlin"}
    services.preferences_update(user=recipient, quiet_hours=quiet)
    # 23:30 in Berlin (UTC+1 in November): inside the span, which spans midnight.
    with time_machine.travel(datetime(2026, 11, 23, 22, 30, tzinfo=UTC), tick=False) as clock:
        first = send(operator_client, recipient, other_recipient, title="First")
        clock.shift(timedelta(hours=2))
        second = send(operator_client, recipient, title="Second")
        third = send(operator_client, recipient, title="Read meanwhile")
        services.inbox_mark_read(user=recipient, item_id=f"m{third}")
        assert push_service.to("night") == []
        assert [p.payload["id"] for p in push_service.to("day") if p.payload] == [f"m{first}"]
        hold = ChannelHold.objects.get(user=recipient)
        # 07:00 in Berlin the next morning.
        assert hold.until == datetime(2026, 11, 24, 6, 0, tzinfo=UTC)
        assert services.channels_quiet_release() == 0  # not over yet
        clock.move_to(datetime(2026, 11, 24, 6, 0, 30, tzinfo=UTC))
        assert services.channels_quiet_release() == 1
        assert services.channels_quiet_release() == 0
    (summary,) = push_service.to("night")
    assert summary.error == ""
    assert summary.payload is not None
    assert summary.payload["id"] == f"m{second}"  # the newest still unread
    assert summary.payload["url"] == "/inbox/"
    assert "2" in summary.payload["title"]
    assert not ChannelHold.objects.exists()
    assert counts(operator_client, first)["sent"] == 2  # the other user's push, and the summary
