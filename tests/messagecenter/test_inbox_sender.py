"""Every inbox item names its sender: the operator's display name for messages
and bulletins an operator wrote, null for what the system sent. The Redis path
and the PostgreSQL fallback answer the same; details written before the field
existed read as null until the drift repair writes them again."""

import json
from datetime import timedelta
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from core.redis import get_redis
from durability import healing
from durability.drift import check_run, drift_checks
from messagecenter import keys as mc_keys
from messagecenter import services
from tests.conftest import client_for
from tests.factories import StaffFactory
from tests.messagecenter.conftest import send

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_grace(settings: Any) -> None:
    settings.MESSAGECENTER_CHECK_GRACE_SECONDS = 0


@pytest.fixture
def items(operator: Any, recipient: Any, clock: Any) -> dict[str, str]:
    """One item of each sort in the recipient's inbox: ref by what it is."""
    named = StaffFactory(username="carol", first_name="Carol", last_name="Chen")
    services.message_type_create(code="stock", name="Stock", default_ttl_seconds=3600)
    services.subscription_create(message_type="stock", scope="WH1", user_id=recipient.pk)
    refs = {
        "by_full_name": send(named, to={"users": [recipient]}, title="From Carol").ref,
        "by_username": send(operator, to={"users": [recipient]}, title="From Olivia").ref,
        "system_message": send(None, to={"users": [recipient]}, title="From nobody").ref,
        "bulletin_by": services.bulletin_create(
            title="News", body_html="<p>n</p>", display_time=clock.now - timedelta(seconds=1), actor=named
        ).ref,
        "bulletin_system": services.bulletin_create(
            title="Old news", body_html="<p>n</p>", display_time=clock.now - timedelta(seconds=2)
        ).ref,
        "notification": services.notification_send(message_type="stock", scope="WH1", title="Low", body_html="").ref,
    }
    return refs


EXPECTED = {
    "by_full_name": "Carol Chen",
    "by_username": "olivia-operator",
    "system_message": None,
    "bulletin_by": "Carol Chen",
    "bulletin_system": None,
    "notification": None,
}


def _senders(client: Any) -> dict[str, Any]:
    return {item["id"]: item["sender"] for item in client.get("/api/v1/inbox/?limit=50").json()["results"]}


def test_sender_in_list_and_detail(items: dict[str, str], recipient: Any) -> None:
    client = client_for(recipient)
    assert _senders(client) == {items[what]: name for what, name in EXPECTED.items()}
    for what, ref in items.items():
        assert client.get(f"/api/v1/inbox/{ref}/").json()["sender"] == EXPECTED[what], what
    # A search keeps the field (the listing path of the read model).
    found = client.get("/api/v1/inbox/?q=carol").json()["results"]
    assert [(i["id"], i["sender"]) for i in found] == [(items["by_full_name"], "Carol Chen")]


def test_the_fallback_names_the_same_senders(
    items: dict[str, str], recipient: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = client_for(recipient)
    from_redis = _senders(client)

    def down() -> None:
        raise RedisConnectionError("down for the test")

    monkeypatch.setattr(healing, "require_ready", down)
    from_postgres = _senders(client)
    assert from_postgres == from_redis == {items[what]: name for what, name in EXPECTED.items()}
    for what, ref in items.items():
        assert client.get(f"/api/v1/inbox/{ref}/").json()["sender"] == EXPECTED[what], what


def test_details_without_the_field_read_as_null_and_are_repaired(items: dict[str, str], recipient: Any) -> None:
    redis = get_redis()
    ref = items["by_full_name"]
    stored = json.loads(redis.hget(mc_keys.item_detail(), ref))
    del stored["sender"]  # as details were written before items named their sender
    redis.hset(mc_keys.item_detail(), ref, json.dumps(stored))
    client = client_for(recipient)
    assert _senders(client)[ref] is None
    assert client.get(f"/api/v1/inbox/{ref}/").json()["sender"] is None
    found = {f.member: f.detail for f in drift_checks()["item_details"].find()}
    assert found == {ref: "detail differs from PostgreSQL"}
    assert check_run(repair=True, areas=["item_details"]).repaired_count == 1
    assert _senders(client)[ref] == "Carol Chen"


def test_a_renamed_operator_keeps_the_old_name_on_delivered_items(items: dict[str, str], recipient: Any) -> None:
    """Delivered details are not rewritten by a rename (new items take the new name)."""
    carol = type(recipient).objects.get(username="carol")
    carol.first_name = "Caroline"
    carol.save()
    client = client_for(recipient)
    later = send(carol, to={"users": [recipient]}, title="Later").ref
    senders = _senders(client)
    assert (senders[items["by_full_name"]], senders[later]) == ("Carol Chen", "Caroline Chen")
