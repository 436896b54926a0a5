"""The user's own preferences: the API, mutes on every delivery path (push,
pull for everyone, bulletins, notifications), counts and the live stream,
unmuting, the rebuild, self-service subscriptions and the settings page.
Each mute test checks the Redis path and PostgreSQL alone (the fallback)."""

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from core.redis import get_redis, keyspace_flush
from live import transport as live
from messagecenter import fallback, services
from messagecenter import keys as mc_keys
from messagecenter.fill import inbox_warm
from messagecenter.models import MessageType, MutePeriod, Subscription, UserPreferences
from messagecenter.mutes import Mutes
from messagecenter.readmodel import inbox, to_ms
from messagecenter.readmodel.inbox import Page
from messagecenter.selectors import inbox_counts, inbox_list
from messagecenter.services.rebuild import inbox_rebuild
from tests.conftest import assert_error, client_for
from tests.messagecenter.conftest import make_group, send, whole_inbox

pytestmark = pytest.mark.django_db(transaction=True)

PREFS = "/api/v1/me/preferences/"
SUBS = "/api/v1/me/subscriptions/"


def refs(user: Any) -> list[str]:
    """The Redis path itself (the selector could answer from PostgreSQL while the read model heals)."""
    page = inbox.inbox_page(user_id=user.pk, now_ms=to_ms(timezone.now()), **whole_inbox(100))
    assert isinstance(page, Page)
    listed = [row.ref for row in page.rows]
    assert [item.id for item in inbox_list(user=user).results] == listed
    return listed


def fallback_refs(user: Any) -> list[str]:
    page = fallback.inbox_page(user_id=user.pk, now=timezone.now(), **whole_inbox(100))
    return [row.ref for row in page.rows]


def both(user: Any) -> list[str]:
    """The user's inbox refs; the Redis path and PostgreSQL alone must agree."""
    redis_refs = refs(user)
    assert fallback_refs(user) == redis_refs
    return redis_refs


def mute(user: Any, categories: list[str] | None = None, types: list[str] | None = None) -> None:
    services.preferences_update(user=user, muted_categories=categories, muted_message_types=types)


@pytest.fixture
def alert(db: None) -> MessageType:
    return services.message_type_create(code="alert", name="Alert", category="system", self_service=True)


@pytest.fixture
def closed_type(db: None) -> MessageType:
    return services.message_type_create(code="audit", name="Audit", category="transaction")


# --- the preferences API ---------------------------------------------------------------


def _mutes_and_digest(body: dict[str, Any]) -> dict[str, Any]:
    """The v1.1 part of the preferences (channels, quiet hours and language are tested with the channels)."""
    return {key: body[key] for key in ("muted_categories", "muted_message_types", "email_digest")}


def test_preferences_start_empty(recipient_client: Any, settings: Any) -> None:
    settings.MESSAGECENTER_DIGEST_DEFAULT = "off"
    response = recipient_client.get(PREFS)
    assert response.status_code == 200
    default_channels = {"email": "if_unread", "web_push": True}
    assert response.json() == {
        "muted_categories": [],
        "muted_message_types": [],
        "email_digest": "off",
        # v1.2: every category's channels (defaults), no quiet hours, no language chosen.
        "channels": dict.fromkeys(("system", "promotion", "transaction", "interaction"), default_channels),
        "quiet_hours": None,
        "language": None,
    }
    # A user who never chose sees the operator's default as it is now.
    settings.MESSAGECENTER_DIGEST_DEFAULT = "daily"
    assert recipient_client.get(PREFS).json()["email_digest"] == "daily"


def test_muting_is_not_a_digest_choice(
    recipient_client: Any, recipient: Any, browser: Client, other_recipient: Any, settings: Any
) -> None:
    settings.MESSAGECENTER_DIGEST_DEFAULT = "daily"
    response = recipient_client.put(PREFS, {"muted_categories": ["promotion"]}, format="json")
    assert response.json()["email_digest"] == "daily"
    assert UserPreferences.objects.get(user=recipient).email_digest == ""  # still following the default
    settings.MESSAGECENTER_DIGEST_DEFAULT = "off"
    assert recipient_client.get(PREFS).json()["email_digest"] == "off"

    # The settings page posts the digest it showed: unchanged, it is no choice; changed, it is.
    settings.MESSAGECENTER_DIGEST_DEFAULT = "daily"
    token = _csrf(browser)
    form = {"action": "preferences", "muted_categories": ["system"], "csrfmiddlewaretoken": token}
    shown = {"email_digest": "daily", "email_digest_shown": "daily"}
    assert browser.post("/inbox/settings/", {**form, **shown}).status_code == 302
    assert UserPreferences.objects.get(user=recipient).email_digest == ""
    assert browser.post("/inbox/settings/", {**form, **shown, "email_digest": "weekly"}).status_code == 302
    assert UserPreferences.objects.get(user=recipient).email_digest == "weekly"
    page = browser.get("/inbox/settings/").content.decode()
    assert 'name="email_digest_shown" value="weekly"' in page
    assert not UserPreferences.objects.filter(user=other_recipient).exists()


def test_put_stores_and_answers_the_preferences(recipient_client: Any, recipient: Any, alert: Any) -> None:
    body = {"muted_categories": ["promotion", "promotion", "system"], "muted_message_types": ["alert"]}
    response = recipient_client.put(PREFS, {**body, "email_digest": "weekly"}, format="json")
    assert response.status_code == 200, response.content
    want = {"muted_categories": ["system", "promotion"], "muted_message_types": ["alert"], "email_digest": "weekly"}
    assert _mutes_and_digest(response.json()) == want
    assert _mutes_and_digest(recipient_client.get(PREFS).json()) == want
    # PostgreSQL: one open period per target, and the digest.
    open_periods = MutePeriod.objects.filter(user=recipient, end_ms__isnull=True)
    assert sorted((p.category, p.message_type_id) for p in open_periods) == [
        ("", alert.pk),
        ("promotion", None),
        ("system", None),
    ]
    assert UserPreferences.objects.get(user=recipient).email_digest == "weekly"
    # The read model holds the same periods.
    mirrored = Mutes.loads(get_redis().get(mc_keys.user_mutes(recipient.pk)))
    assert set(mirrored.categories) == {"system", "promotion"}
    assert set(mirrored.types) == {alert.pk}
    # A field left out stays; an empty list unmutes (the period closes, the key follows).
    response = recipient_client.put(PREFS, {"muted_categories": []}, format="json")
    assert _mutes_and_digest(response.json()) == {
        "muted_categories": [],
        "muted_message_types": ["alert"],
        "email_digest": "weekly",
    }
    assert MutePeriod.objects.filter(user=recipient, end_ms__isnull=False).count() == 2
    assert set(Mutes.loads(get_redis().get(mc_keys.user_mutes(recipient.pk))).categories) == {"system", "promotion"}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"muted_categories": ["system", "spam", "ads"]}, "muted_categories"),
        ({"muted_message_types": ["alert", "nope"]}, "muted_message_types"),
        ({"muted_categories": "system"}, "muted_categories"),
        ({"muted_categories": [1]}, "muted_categories"),
        ({"muted_message_types": [None]}, "muted_message_types"),
        ({"email_digest": "hourly"}, "email_digest"),
        ({"muted_categories": [], "colour": "red"}, "colour"),
    ],
)
def test_bad_preferences_are_400_and_change_nothing(
    recipient_client: Any, recipient: Any, alert: Any, body: dict[str, Any], field: str
) -> None:
    recipient_client.put(PREFS, {"muted_categories": ["promotion"]}, format="json")
    before = list(MutePeriod.objects.values_list("pk", "end_ms"))
    error = assert_error(recipient_client.put(PREFS, body, format="json"), 400)
    assert field in error["fields"]
    if field == "muted_categories" and "spam" in str(body):
        assert "spam" in error["message"]
        assert "ads" in error["message"]
    if field == "muted_message_types":
        assert "nope" in error["message"] or error["fields"][field]
    assert list(MutePeriod.objects.values_list("pk", "end_ms")) == before
    assert recipient_client.get(PREFS).json()["muted_categories"] == ["promotion"]


def test_duplicates_count_once(recipient_client: Any, alert: Any) -> None:
    body = {
        "muted_categories": ["system", "system", "promotion", "transaction", "interaction", "promotion"],
        "muted_message_types": ["alert", "alert"],
    }
    response = recipient_client.put(PREFS, body, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["muted_categories"] == ["system", "promotion", "transaction", "interaction"]
    assert response.json()["muted_message_types"] == ["alert"]
    # The same again changes nothing: no new period.
    count = MutePeriod.objects.count()
    assert recipient_client.put(PREFS, body, format="json").status_code == 200
    assert MutePeriod.objects.count() == count == 5


def test_unauthenticated_is_401(anon_client: Any) -> None:
    for response in (
        anon_client.get(PREFS),
        anon_client.put(PREFS, {}, format="json"),
        anon_client.get(SUBS),
        anon_client.post(SUBS, {"message_type": "alert", "scope": "x"}, format="json"),
        anon_client.delete(f"{SUBS}1/"),
    ):
        assert_error(response, 401)


# --- mutes on every delivery path ----------------------------------------------------------


def test_muted_push_is_skipped_counts_and_live_unmoved(
    operator: Any, recipient: Any, other_recipient: Any, clock: Any
) -> None:
    send(operator, to={"users": [recipient]}, category="promotion", title="before")
    clock.advance(seconds=1)
    mute(recipient, ["promotion"])
    version = live.user_version(user_id=recipient.pk)
    counts = inbox_counts(user=recipient)
    clock.advance(seconds=1)
    muted = send(operator, to={"users": [recipient, other_recipient]}, category="promotion", title="muted")
    other = send(operator, to={"users": [recipient]}, category="system", title="other category")
    assert muted.delivery == "push"
    assert both(recipient) == [other.ref, "m" + str(muted.pk - 1)]
    assert muted.ref in both(other_recipient)
    assert not get_redis().zscore(
        mc_keys.inbox(recipient.pk), f"{muted.ref}|promotion|{muted.slot_month}|{muted.slot_offset}"
    )
    after = inbox_counts(user=recipient)
    assert after["by_category"]["promotion"] == counts["by_category"]["promotion"] == 1
    assert after["unread"] == counts["unread"] + 1  # the system message only
    # The live version moved once: for the unmuted system message, not the muted one.
    assert live.user_version(user_id=recipient.pk) == version + 1


def test_unmuting_does_not_resurrect(operator: Any, recipient: Any, clock: Any) -> None:
    mute(recipient, ["promotion"])
    clock.advance(seconds=1)
    muted = send(operator, to={"users": [recipient]}, category="promotion", title="while muted")
    clock.advance(seconds=1)
    mute(recipient, [])
    assert both(recipient) == []
    clock.advance(seconds=1)
    fresh = send(operator, to={"users": [recipient]}, category="promotion", title="after")
    assert both(recipient) == [fresh.ref]
    assert muted.ref not in both(recipient)
    assert inbox_counts(user=recipient)["unread"] == 1


def test_muted_pull_for_everyone_is_not_merged(operator: Any, recipient: Any, other_recipient: Any, clock: Any) -> None:
    before = send(operator, to={"everyone": True}, category="promotion", title="before")
    clock.advance(seconds=1)
    mute(recipient, ["promotion"])
    clock.advance(seconds=1)
    muted = send(operator, to={"everyone": True}, category="promotion", title="muted")
    assert muted.delivery == "pull"
    assert both(recipient) == [before.ref]
    assert both(other_recipient) == [muted.ref, before.ref]
    assert inbox_counts(user=recipient)["by_category"]["promotion"] == 1
    clock.advance(seconds=1)
    mute(recipient, [])
    assert both(recipient) == [before.ref]


def test_muted_pull_to_a_large_audience_is_not_merged(
    operator: Any, recipient: Any, other_recipient: Any, clock: Any, settings: Any
) -> None:
    settings.MESSAGECENTER_PUSH_THRESHOLD = 1
    mute(recipient, ["transaction"])
    clock.advance(seconds=1)
    muted = send(operator, to={"users": [recipient, other_recipient]}, category="transaction")
    assert muted.delivery == "pull"
    assert both(recipient) == []
    assert both(other_recipient) == [muted.ref]


def test_muted_bulletin_category_system(operator: Any, recipient: Any, other_recipient: Any, clock: Any) -> None:
    group = make_group("staff", recipient, other_recipient)
    mute(recipient, ["system"])
    clock.advance(seconds=1)
    bulletin = services.bulletin_create(
        title="Maintenance", body_html="<p>x</p>", display_time=timezone.now(), group_ids=[group.pk]
    )
    assert both(recipient) == []
    assert both(other_recipient) == [bulletin.ref]
    assert inbox_counts(user=recipient)["by_category"]["system"] == 0


def test_bulletin_displayed_after_unmute_shows(operator: Any, recipient: Any, clock: Any) -> None:
    """A bulletin arrives at its display time: muted when created, unmuted before it shows."""
    mute(recipient, ["system"])
    bulletin = services.bulletin_create(
        title="Later", body_html="", display_time=timezone.now() + timedelta(minutes=10), group_ids=[]
    )
    clock.advance(minutes=5)
    mute(recipient, [])
    clock.advance(minutes=6)
    assert both(recipient) == [bulletin.ref]


def test_muted_notification_type_and_category(
    alert: Any, recipient: Any, other_recipient: Any, outsider: Any, clock: Any
) -> None:
    for user in (recipient, other_recipient, outsider):
        services.subscription_create(message_type="alert", scope="WH1", user_id=user.pk)
    mute(recipient, types=["alert"])
    mute(other_recipient, ["system"])
    clock.advance(seconds=1)
    version = live.user_version(user_id=recipient.pk)
    notification = services.notification_send(message_type="alert", scope="WH1", title="Low stock", body_html="")
    assert both(recipient) == []
    assert both(other_recipient) == []
    assert both(outsider) == [notification.ref]
    assert live.user_version(user_id=recipient.pk) == version
    assert inbox_counts(user=recipient)["unread"] == 0


def test_rebuild_keeps_muted_items_out(operator: Any, recipient: Any, alert: Any, clock: Any) -> None:
    services.subscription_create(message_type="alert", scope="s", user_id=recipient.pk)
    kept = send(operator, to={"users": [recipient]}, category="promotion", title="kept")
    clock.advance(seconds=1)
    mute(recipient, ["promotion"], ["alert"])
    clock.advance(seconds=1)
    send(operator, to={"users": [recipient]}, category="promotion", title="push muted")
    send(operator, to={"everyone": True}, category="promotion", title="pull muted")
    services.notification_send(message_type="alert", scope="s", title="n", body_html="")
    clock.advance(seconds=1)
    mute(recipient, [], [])
    assert both(recipient) == [kept.ref]
    keyspace_flush()
    inbox_rebuild()
    inbox_warm(user_ids=[recipient.pk])
    assert both(recipient) == [kept.ref]
    # The user's fill restored the periods for the merge on read.
    assert set(Mutes.loads(get_redis().get(mc_keys.user_mutes(recipient.pk))).categories) == {"promotion"}


# --- self-service subscriptions ---------------------------------------------------------


def test_self_service_subscription_lifecycle(
    recipient: Any, recipient_client: Any, outsider_client: Any, alert: Any, clock: Any
) -> None:
    assert recipient_client.get(SUBS).json() == {"results": []}
    response = recipient_client.post(SUBS, {"message_type": "alert", "scope": "WH1"}, format="json")
    assert response.status_code == 201, response.content
    created = response.json()
    assert (created["message_type"], created["scope"]) == ("alert", "WH1")
    assert isinstance(created["id"], str)
    assert Subscription.objects.get(pk=created["id"]).user_id == recipient.pk
    assert get_redis().sismember(mc_keys.subscribers(alert.pk, "WH1"), f"u{recipient.pk}")
    assert recipient_client.get(SUBS).json() == {"results": [created]}
    assert_error(recipient_client.post(SUBS, {"message_type": "alert", "scope": "WH1"}, format="json"), 409)
    # Someone else's id, an unknown one: 404; the owner's: 204, and the set follows.
    assert_error(outsider_client.delete(f"{SUBS}{created['id']}/"), 404)
    assert_error(recipient_client.delete(f"{SUBS}999999/"), 404)
    assert recipient_client.delete(f"{SUBS}{created['id']}/").status_code == 204
    assert not Subscription.objects.filter(pk=created["id"]).exists()
    assert not get_redis().sismember(mc_keys.subscribers(alert.pk, "WH1"), f"u{recipient.pk}")
    assert recipient_client.get(SUBS).json() == {"results": []}
    # The id as a JSON integer works too.
    again = recipient_client.post(SUBS, {"message_type": "alert", "scope": "WH2"}, format="json").json()
    assert recipient_client.delete(f"{SUBS}{int(again['id'])}/").status_code == 204


@pytest.mark.usefixtures("closed_type")
def test_self_service_rules(recipient_client: Any) -> None:
    assert_error(recipient_client.post(SUBS, {"message_type": "audit", "scope": "x"}, format="json"), 403)
    assert_error(recipient_client.post(SUBS, {"message_type": "nope", "scope": "x"}, format="json"), 400)
    assert_error(recipient_client.post(SUBS, {"message_type": "audit"}, format="json"), 400)
    assert_error(recipient_client.post(SUBS, {"message_type": 5, "scope": "x"}, format="json"), 400)
    assert not Subscription.objects.exists()


def test_group_subscriptions_are_not_listed_nor_deletable(recipient: Any, recipient_client: Any, alert: Any) -> None:
    group = make_group("ops", recipient)
    via_group = services.subscription_create(message_type="alert", scope="WH1", group_id=group.pk)
    assert recipient_client.get(SUBS).json() == {"results": []}
    assert_error(recipient_client.delete(f"{SUBS}{via_group.pk}/"), 404)


def test_self_subscribed_user_gets_a_notification_once(recipient: Any, recipient_client: Any, alert: Any) -> None:
    group = make_group("ops", recipient)
    services.subscription_create(message_type="alert", scope="WH1", group_id=group.pk)
    assert recipient_client.post(SUBS, {"message_type": "alert", "scope": "WH1"}, format="json").status_code == 201
    notification = services.notification_send(message_type="alert", scope="WH1", title="Low", body_html="")
    assert notification.recipients == 1
    assert both(recipient) == [notification.ref]
    assert inbox_counts(user=recipient)["unread"] == 1


def test_operator_creates_self_service_types(operator_client: Any) -> None:
    response = operator_client.post(
        "/api/v1/manage/message-types/", {"code": "news", "name": "News", "self_service": True}, format="json"
    )
    assert response.status_code == 201
    assert response.json()["self_service"] is True
    assert MessageType.objects.get(code="news").self_service is True
    plain = operator_client.post("/api/v1/manage/message-types/", {"code": "ops", "name": "Ops"}, format="json")
    assert plain.json()["self_service"] is False
    bad = {"code": "x", "name": "X", "self_service": "yes"}
    assert_error(operator_client.post("/api/v1/manage/message-types/", bad, format="json"), 400)


def test_openapi_describes_the_endpoints(anon_client: Any) -> None:
    schema = anon_client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    paths = schema["paths"]
    assert {"get", "put"} <= set(paths["/api/v1/me/preferences/"])
    assert {"get", "post"} <= set(paths["/api/v1/me/subscriptions/"])
    assert "delete" in paths["/api/v1/me/subscriptions/{subscription_id}/"]
    schemas = schema["components"]["schemas"]
    assert {"muted_categories", "muted_message_types", "email_digest"} <= set(schemas["Preferences"]["properties"])
    message_type = next(s for name, s in schemas.items() if "MessageTypeCreate" in name and "Output" in name)
    assert "self_service" in message_type["properties"]


# --- the settings page ------------------------------------------------------------------


@pytest.fixture
def browser(recipient: Any) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(recipient)
    return client


def _csrf(browser: Client) -> str:
    response = browser.get("/inbox/settings/")
    assert response.status_code == 200
    return str(response.context["csrf_token"])


@pytest.mark.usefixtures("closed_type")
def test_settings_page_renders_and_is_linked(browser: Client, recipient: Any, alert: Any) -> None:
    group = make_group("ops", recipient)
    services.subscription_create(message_type="audit", scope="HQ", group_id=group.pk)
    html = browser.get("/inbox/settings/").content.decode()
    assert 'name="muted_categories" value="promotion"' in html
    assert 'name="muted_message_types" value="audit"' in html
    assert '<option value="alert">' in html  # self-service only
    assert '<option value="audit">' not in html
    assert "HQ" in html  # through the group, read-only
    assert "ops" in html
    assert "csrfmiddlewaretoken" in html
    assert 'href="/inbox/settings/"' in browser.get("/inbox/").content.decode()
    assert Client().get("/inbox/settings/").status_code == 302


def test_settings_page_forms(browser: Client, recipient: Any, alert: Any) -> None:
    token = _csrf(browser)
    assert (
        browser.post("/inbox/settings/", {"action": "preferences", "muted_categories": ["promotion"]}).status_code
        == 403
    )
    response = browser.post(
        "/inbox/settings/",
        {
            "action": "preferences",
            "muted_categories": ["promotion", "interaction"],
            "muted_message_types": ["alert"],
            "email_digest": "daily",
            "csrfmiddlewaretoken": token,
        },
    )
    assert response.status_code == 302
    prefs = _mutes_and_digest(client_for(recipient).get(PREFS).json())
    assert prefs == {
        "muted_categories": ["promotion", "interaction"],
        "muted_message_types": ["alert"],
        "email_digest": "daily",
    }
    follow = {"action": "follow", "message_type": "alert", "scope": "WH9", "csrfmiddlewaretoken": token}
    assert browser.post("/inbox/settings/", follow).status_code == 302
    subscription = Subscription.objects.get(user=recipient)
    assert subscription.scope == "WH9"
    page = browser.get("/inbox/settings/").content.decode()
    assert "WH9" in page
    assert 'name="muted_categories" value="promotion" checked' in page
    # A duplicate shows a message, changes nothing.
    browser.post("/inbox/settings/", follow)
    assert Subscription.objects.filter(user=recipient).count() == 1
    unfollow = {"action": "unfollow", "subscription": str(subscription.pk), "csrfmiddlewaretoken": token}
    assert browser.post("/inbox/settings/", unfollow).status_code == 302
    assert not Subscription.objects.filter(user=recipient).exists()
    # Unticking everything unmutes.
    browser.post("/inbox/settings/", {"action": "preferences", "csrfmiddlewaretoken": token})
    assert client_for(recipient).get(PREFS).json()["muted_categories"] == []


def test_deleting_the_user_drops_the_mirror(recipient: Any) -> None:
    mute(recipient, ["promotion"])
    assert get_redis().exists(mc_keys.user_mutes(recipient.pk))
    user_id = recipient.pk
    recipient.delete()
    assert not MutePeriod.objects.filter(user_id=user_id).exists()
    assert not get_redis().exists(mc_keys.user_mutes(user_id))
