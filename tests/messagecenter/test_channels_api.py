"""The channels' REST contract: the VAPID public key, the user's push
subscriptions, the preferences' channels, quiet hours and language, and the
manage creates' ``channels`` with their read-back. Bad input is the error
envelope's 400 and changes nothing."""

import base64
from io import StringIO
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from django.core.management import call_command

from messagecenter import services
from messagecenter.models import ItemChannels, Message, PushSubscription, UserPreferences
from tests.conftest import assert_error, client_for

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "/api/v1/push/public-key/"
SUBS = "/api/v1/me/push-subscriptions/"
PREFS = "/api/v1/me/preferences/"
MESSAGES = "/api/v1/manage/messages/"
NOTIFICATIONS = "/api/v1/manage/notifications/"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def browser_keys() -> dict[str, str]:
    point = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    )
    return {"p256dh": b64url(point), "auth": b64url(b"0123456789abcdef")}


def subscription(name: str = "a1") -> dict[str, Any]:
    return {"endpoint": f"https://push.example.net/wpush/v2/{name}", "expirationTime": None, "keys": browser_keys()}


# --- the public key -----------------------------------------------------------------------


def test_public_key_needs_no_credentials_and_is_a_p256_point(anon_client: Any, recipient_client: Any) -> None:
    response = anon_client.get(KEY)
    assert response.status_code == 200
    key = response.json()["public_key"]
    raw = base64.urlsafe_b64decode(key + "=" * (-len(key) % 4))
    assert len(raw) == 65
    assert raw[0] == 4
    ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), raw)
    assert "=" not in key
    # A bad token changes nothing: the key is public.
    anon_client.credentials(HTTP_AUTHORIZATION="Token nope")
    assert anon_client.get(KEY).json() == {"public_key": key}
    assert recipient_client.get(KEY).json() == {"public_key": key}


def test_the_key_comes_from_the_setting_when_one_is_set(anon_client: Any, settings: Any) -> None:
    private = ec.generate_private_key(ec.SECP256R1())
    settings.MESSAGECENTER_VAPID_PRIVATE_KEY = b64url(private.private_numbers().private_value.to_bytes(32, "big"))
    public = private.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    assert anon_client.get(KEY).json() == {"public_key": b64url(public)}


# --- push subscriptions ----------------------------------------------------------------------


def test_subscribe_list_and_delete(recipient_client: Any, recipient: Any) -> None:
    body = subscription()
    created = recipient_client.post(SUBS, body, format="json")
    assert created.status_code == 201, created.content
    sub_id = created.json()["id"]
    assert isinstance(sub_id, str)
    # The same endpoint again: 200 and the same id (new keys are kept).
    again = recipient_client.post(SUBS, {**body, "keys": browser_keys()}, format="json")
    assert again.status_code == 200
    assert again.json()["id"] == sub_id
    second = recipient_client.post(SUBS, subscription("b2"), format="json").json()["id"]
    listed = recipient_client.get(SUBS).json()
    assert [r["id"] for r in listed["results"]] == [second, sub_id]
    assert set(listed["results"][0]) == {"id", "endpoint", "created_at"}
    assert listed["results"][1]["endpoint"] == body["endpoint"]
    assert recipient_client.delete(f"{SUBS}{sub_id}/").status_code == 204
    assert [r["id"] for r in recipient_client.get(SUBS).json()["results"]] == [second]
    assert_error(recipient_client.delete(f"{SUBS}{sub_id}/"), 404)


def test_another_users_subscription_is_a_404_and_ids_are_checked(
    recipient_client: Any, outsider_client: Any, anon_client: Any
) -> None:
    sub_id = recipient_client.post(SUBS, subscription(), format="json").json()["id"]
    assert_error(outsider_client.delete(f"{SUBS}{sub_id}/"), 404)
    assert outsider_client.get(SUBS).json() == {"results": []}
    assert_error(outsider_client.delete(f"{SUBS}abc/"), 400)
    assert_error(outsider_client.delete(f"{SUBS}0/"), 400)
    assert_error(anon_client.get(SUBS), 401)
    assert_error(anon_client.post(SUBS, subscription(), format="json"), 401)
    assert PushSubscription.objects.count() == 1


@pytest.mark.parametrize(
    "change",
    [
        {"endpoint": "http://push.example.net/x"},
        {"endpoint": "ftp://push.example.net/x"},
        {"endpoint": "not a url"},
        {"endpoint": ""},
        {"endpoint": 42},
        {"keys": {"p256dh": b64url(b"\x04" + b"\x01" * 64), "auth": b64url(b"0123456789abcdef")}},  # off the curve
        {"keys": {"p256dh": b64url(b"\x02" + b"\x01" * 32), "auth": b64url(b"0123456789abcdef")}},  # compressed
        {"keys": {"p256dh": "!!!", "auth": b64url(b"0123456789abcdef")}},
        {"keys": {"p256dh": browser_keys()["p256dh"], "auth": b64url(b"short")}},
        {"keys": {"p256dh": browser_keys()["p256dh"]}},
        {"keys": "x"},
        {"keys": None},
        {"unexpected": True},
    ],
)
def test_bad_subscriptions_are_400_and_store_nothing(recipient_client: Any, change: dict[str, Any]) -> None:
    assert_error(recipient_client.post(SUBS, {**subscription(), **change}, format="json"), 400)
    assert not PushSubscription.objects.exists()


def test_an_endpoint_moves_to_whoever_subscribes_it_now(recipient_client: Any, outsider_client: Any) -> None:
    body = subscription()
    first = recipient_client.post(SUBS, body, format="json").json()["id"]
    moved = outsider_client.post(SUBS, body, format="json")
    assert moved.status_code == 201
    assert moved.json()["id"] != first
    assert recipient_client.get(SUBS).json() == {"results": []}


# --- preferences: channels, quiet hours, language ----------------------------------------------


def test_preferences_channels_quiet_hours_and_language(recipient_client: Any, recipient: Any) -> None:
    body = {
        "channels": {"promotion": {"email": "digest", "web_push": False}, "system": {"email": "off"}},
        "quiet_hours": {"start": "22:30", "end": "06:45", "timezone": "Asia/Shanghai"},
        "language": "zh-Hans",
    }
    response = recipient_client.put(PREFS, body, format="json")
    assert response.status_code == 200, response.content
    got = response.json()
    assert got["channels"] == {
        "system": {"email": "off", "web_push": True},
        "promotion": {"email": "digest", "web_push": False},
        "transaction": {"email": "if_unread", "web_push": True},
        "interaction": {"email": "if_unread", "web_push": True},
    }
    assert got["quiet_hours"] == {"start": "22:30", "end": "06:45", "timezone": "Asia/Shanghai"}
    assert got["language"] == "zh-hans"
    assert recipient_client.get(PREFS).json() == got
    # Fields left out stay; null clears quiet hours and the language.
    cleared = recipient_client.put(PREFS, {"quiet_hours": None, "language": None}, format="json").json()
    assert cleared["quiet_hours"] is None
    assert cleared["language"] is None
    assert cleared["channels"] == got["channels"]
    # Only choices away from the defaults are stored.
    recipient_client.put(PREFS, {"channels": {"system": {"email": "if_unread"}}}, format="json")
    assert UserPreferences.objects.get(user=recipient).channels == {"promotion": {"email": "digest", "web_push": False}}


@pytest.mark.parametrize(
    "body",
    [
        {"channels": {"news": {"email": "off"}}},
        {"channels": {"system": {"email": "weekly"}}},
        {"channels": {"system": {"web_push": "yes"}}},
        {"channels": {"system": {"sms": True}}},
        {"channels": {"system": "off"}},
        {"channels": ["system"]},
        {"quiet_hours": {"start": "24:00", "end": "07:00", "timezone": "UTC"}},
        {"quiet_hours": {"start": "7:00", "end": "08:00", "timezone": "UTC"}},
        {"quiet_hours": {"start": "07:00", "end": "08:60", "timezone": "UTC"}},
        {"quiet_hours": {"start": "07:00", "end": "08:00", "timezone": "Mars/Olympus"}},
        {"quiet_hours": {"start": "07:00", "end": "08:00", "timezone": "../../etc/passwd"}},
        {"quiet_hours": {"start": "07:00", "end": "08:00"}},
        {"quiet_hours": {"start": 7, "end": "08:00", "timezone": "UTC"}},
        {"quiet_hours": "22:00-07:00"},
        {"language": "fr"},
        {"language": 5},
        {"channels": {"system": {"email": "off"}}, "language": "xx"},
    ],
)
def test_bad_preferences_are_400_and_change_nothing(recipient_client: Any, body: dict[str, Any]) -> None:
    before = recipient_client.get(PREFS).json()
    assert_error(recipient_client.put(PREFS, body, format="json"), 400)
    assert recipient_client.get(PREFS).json() == before


# --- manage creates ---------------------------------------------------------------------------


def message_body(users: list[Any], **extra: Any) -> dict[str, Any]:
    return {"category": "system", "title": "T", "body_html": "", "to": {"users": [u.pk for u in users]}, **extra}


@pytest.mark.parametrize(
    "channels",
    [
        {"email_if_unread_after_seconds": 59},
        {"email_if_unread_after_seconds": 604_801},
        {"email_if_unread_after_seconds": "600"},
        {"email_if_unread_after_seconds": 600.5},
        {"email_if_unread_after_seconds": True},
        {"web_push": "true"},
        {"web_push": 1},
        {"sms": True},
        "web_push",
    ],
)
def test_bad_channels_on_a_create_are_400_and_create_nothing(
    operator_client: Any, recipient: Any, channels: Any
) -> None:
    assert_error(operator_client.post(MESSAGES, message_body([recipient], channels=channels), format="json"), 400)
    assert not Message.objects.exists()
    assert not ItemChannels.objects.exists()


def test_message_channels_are_read_back(operator_client: Any, recipient: Any) -> None:
    for seconds in (60, 604_800):
        body = message_body([recipient], channels={"web_push": True, "email_if_unread_after_seconds": seconds})
        response = operator_client.post(MESSAGES, body, format="json")
        assert response.status_code == 202, response.content
        read = operator_client.get(f"{MESSAGES}{response.json()['id']}/").json()
        # The counts exactly as the contract names them; what was asked beside them.
        assert read["channels"] == {
            "web_push": {"sent": 0, "failed": 0},
            "email": {"sent": 0, "skipped_read": 0, "deferred": 0},
        }
        assert read["channels_requested"] == {"web_push": True, "email_if_unread_after_seconds": seconds}
    plain = operator_client.post(MESSAGES, message_body([recipient]), format="json").json()["id"]
    listed = {m["id"]: m for m in operator_client.get(MESSAGES).json()["results"]}
    assert listed[plain]["channels"]["web_push"] == {"sent": 0, "failed": 0}
    assert listed[plain]["channels_requested"] == {"web_push": False, "email_if_unread_after_seconds": None}


def test_notification_creates_accept_channels(operator_client: Any, recipient: Any) -> None:
    services.message_type_create(code="stock", name="Stock")
    services.subscription_create(message_type="stock", scope="WH1", user_id=recipient.pk)
    body = {"message_type": "stock", "scope": "WH1", "title": "Low", "body_html": ""}
    bad = {**body, "channels": {"email_if_unread_after_seconds": 10}}
    assert_error(operator_client.post(NOTIFICATIONS, bad, format="json"), 400)
    response = operator_client.post(
        NOTIFICATIONS, {**body, "channels": {"email_if_unread_after_seconds": 3600}}, format="json"
    )
    assert response.status_code == 202, response.content
    read = operator_client.get(f"{NOTIFICATIONS}{response.json()['id']}/").json()
    assert read["channels_requested"] == {"web_push": False, "email_if_unread_after_seconds": 3600}
    assert read["channels"] == {
        "web_push": {"sent": 0, "failed": 0},
        "email": {"sent": 0, "skipped_read": 0, "deferred": 0},
    }
    listed = operator_client.get(NOTIFICATIONS).json()["results"]
    assert listed[0]["channels_requested"]["email_if_unread_after_seconds"] == 3600


def test_the_schema_describes_the_channels(anon_client: Any, operator: Any) -> None:
    schema = client_for(operator).get("/api/schema/?format=json").json()
    paths = schema["paths"]
    assert "get" in paths["/api/v1/push/public-key/"]
    assert {"get", "post"} <= set(paths["/api/v1/me/push-subscriptions/"])
    assert "delete" in paths["/api/v1/me/push-subscriptions/{subscription_id}/"]
    components = schema["components"]["schemas"]
    preferences = components["Preferences"]["properties"]
    assert {"channels", "quiet_hours", "language"} <= set(preferences)
    send = components["MessageSendApiInputRequest"]["properties"]
    assert "channels" in send
    assert set(components["ItemChannelsRequest"]["properties"]) == {"web_push", "email_if_unread_after_seconds"}
    read = components["MessageRead"]["properties"]
    assert "channels" in read


def test_vapid_keys_command_writes_a_key_once_and_the_api_serves_it(
    anon_client: Any, settings: Any, tmp_path: Any
) -> None:
    path = tmp_path / "vapid"
    settings.MESSAGECENTER_VAPID_PRIVATE_KEY = ""
    settings.MESSAGECENTER_VAPID_KEY_FILE = str(path)
    derived = anon_client.get(KEY).json()["public_key"]  # no key anywhere: one derived from SECRET_KEY
    out = StringIO()
    call_command("vapid_keys", "--write", stdout=out)
    assert path.stat().st_mode & 0o777 == 0o600
    served = anon_client.get(KEY).json()["public_key"]
    assert served != derived
    assert served in out.getvalue()
    call_command("vapid_keys", "--write", stdout=StringIO())  # kept: subscriptions stay valid
    assert anon_client.get(KEY).json()["public_key"] == served
    printed = StringIO()
    call_command("vapid_keys", stdout=printed)
    assert printed.getvalue().startswith("MESSAGECENTER_VAPID_PRIVATE_KEY=")
