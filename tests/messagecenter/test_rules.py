"""Configurable business rules: notify once per matching object, withdraw
when it clears, notify again on a new match; validation, isolation of broken
rules, dry runs, the beat task, ``run_rules`` and the admin."""

from io import StringIO
from typing import Any

import pytest
from django.contrib.contenttypes.models import ContentType
from django.core.management import CommandError, call_command
from django.test import Client

from core.api.errors import ValidationFailed
from messagecenter import services, tasks
from messagecenter.models import Notification, NotificationRule, RuleMatch, RuleRun, StockLevel
from messagecenter.selectors import inbox_list
from messagecenter.services.rules import rule_filters_validate

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def subscribed(recipient: Any, other_recipient: Any) -> None:
    services.message_type_create(code="replenish", name="Replenish")
    services.subscription_create(message_type="replenish", scope="WH1", user_id=recipient.pk)
    services.subscription_create(message_type="replenish", scope="WH2", user_id=other_recipient.pk)


def make_rule(**overrides: Any) -> NotificationRule:
    from messagecenter.models import MessageType

    fields: dict[str, Any] = {
        "name": "Negative stock",
        "content_type": ContentType.objects.get_for_model(StockLevel),
        "filters": {"quantity__lt": 0},
        "message_type": MessageType.objects.get(code="replenish"),
        "scope_field": "warehouse",
        "title_template": "Replenish {{ object.location }} ({{ object.quantity }})",
        "body_template": "<p>{{ object.sku }} <script>alert(1)</script></p>",
        "interval_seconds": 60,
        **overrides,
    }
    return NotificationRule.objects.create(**fields)


def stock(warehouse: str, location: str, quantity: int) -> StockLevel:
    return StockLevel.objects.create(warehouse=warehouse, location=location, sku=f"SKU-{location}", quantity=quantity)


def titles(user: Any) -> list[str]:
    return [item.title for item in inbox_list(user=user).results]


@pytest.mark.usefixtures("subscribed")
def test_rule_notifies_once_withdraws_and_renotifies(recipient: Any, other_recipient: Any, clock: Any) -> None:
    a = stock("WH1", "A-01", -3)
    stock("WH1", "A-02", 5)
    stock("WH2", "B-01", -1)
    rule = make_rule()
    outcome = services.rule_run(rule=rule)
    assert (outcome.matches, outcome.sent, outcome.withdrawn, outcome.errors) == (2, 2, 0, [])
    assert titles(recipient) == ["Replenish A-01 (-3)"]
    assert titles(other_recipient) == ["Replenish B-01 (-1)"]  # scope from the object's warehouse
    first = Notification.objects.get(scope="WH1")
    assert (first.rule_id, first.source_id) == (rule.pk, str(a.pk))
    assert first.body_html == "<p>SKU-A-01 </p>"  # autoescaped, then sanitised
    # No repeat while it keeps matching.
    clock.advance(seconds=60)
    assert services.rule_run(rule=rule).sent == 0
    assert Notification.objects.count() == 2
    # Cleared: withdrawn from every inbox, match forgotten.
    a.quantity = 10
    a.save()
    clock.advance(seconds=60)
    outcome = services.rule_run(rule=rule)
    assert (outcome.matches, outcome.sent, outcome.withdrawn) == (1, 0, 1)
    assert titles(recipient) == []
    assert Notification.objects.get(pk=first.pk).withdrawn
    assert not RuleMatch.objects.filter(object_pk=str(a.pk)).exists()
    # Matches again: a new notification.
    a.quantity = -7
    a.save()
    clock.advance(seconds=60)
    assert services.rule_run(rule=rule).sent == 1
    assert titles(recipient) == ["Replenish A-01 (-7)"]
    runs = list(RuleRun.objects.filter(rule=rule).order_by("started_at").values_list("sent", "withdrawn", "errors"))
    assert runs == [(2, 0, ""), (0, 0, ""), (0, 1, ""), (1, 0, "")]


def test_filter_validation() -> None:
    assert rule_filters_validate(model=StockLevel, filters={"quantity__lt": 0, "location__startswith": "A"})
    assert rule_filters_validate(model=StockLevel, filters={"warehouse": "WH1", "sku__in": ["a", "b"]})
    for bad in (
        {"nope__lt": 0},
        {"quantity__regex": ".*"},
        {"quantity__year": 2020},
        {"quantity__lt": {"a": 1}},
        {"quantity__in": 3},
        {"quantity__range": [1]},
        {"warehouse__x__y": 1},
        ["quantity__lt"],
        {"": 1},
    ):
        with pytest.raises(ValidationFailed):
            rule_filters_validate(model=StockLevel, filters=bad)


@pytest.mark.usefixtures("subscribed")
def test_broken_rule_is_recorded_and_others_run(recipient: Any, clock: Any) -> None:
    stock("WH1", "A-01", -3)
    bad_lookup = make_rule(name="bad lookup", filters={"nope__lt": 0})
    bad_template = make_rule(name="bad template", title_template="{% if %}")
    missing = make_rule(name="missing field", scope_field="no_such_field")
    good = make_rule(name="good")
    outcomes = services.rules_run_due()
    assert {o.rule.name: o.sent for o in outcomes} == {
        "bad lookup": 0,
        "bad template": 0,
        "missing field": 0,
        "good": 1,
    }
    for rule in (bad_lookup, bad_template, missing):
        run = RuleRun.objects.get(rule=rule)
        assert run.errors, rule.name
    assert "nope" in RuleRun.objects.get(rule=bad_lookup).errors
    assert RuleRun.objects.get(rule=good).errors == ""
    assert titles(recipient) == ["Replenish A-01 (-3)"]


@pytest.mark.usefixtures("subscribed")
def test_per_object_error_does_not_stop_the_rule(recipient: Any, clock: Any) -> None:
    stock("WH1", "A-01", -3)
    stock("", "X-01", -1)  # empty scope field: this object is skipped and recorded
    outcome = services.rule_run(rule=make_rule())
    assert outcome.sent == 1
    assert "empty" in RuleRun.objects.get().errors


@pytest.mark.usefixtures("subscribed")
def test_dry_run_sends_nothing(recipient: Any, clock: Any) -> None:
    stock("WH1", "A-01", -3)
    rule = make_rule()
    outcome = services.rule_run(rule=rule, dry_run=True)
    assert [(p.scope, p.title) for p in outcome.preview] == [("WH1", "Replenish A-01 (-3)")]
    assert Notification.objects.count() == RuleMatch.objects.count() == RuleRun.objects.count() == 0
    assert NotificationRule.objects.get(pk=rule.pk).last_run_at is None
    assert titles(recipient) == []


@pytest.mark.usefixtures("subscribed")
def test_due_rules_and_beat_task(recipient: Any, clock: Any) -> None:
    stock("WH1", "A-01", -3)
    rule = make_rule(interval_seconds=300)
    make_rule(name="off", enabled=False)
    assert tasks.rules_run_due_task() == 1
    assert tasks.rules_run_due_task() == 0  # not due yet
    clock.advance(seconds=299)
    assert services.rules_run_due() == []
    clock.advance(seconds=1)  # last_run_at + interval <= now
    assert [o.rule.pk for o in services.rules_run_due()] == [rule.pk]
    assert Notification.objects.count() == 1


@pytest.mark.usefixtures("subscribed")
def test_run_rules_command(recipient: Any, clock: Any) -> None:
    stock("WH1", "A-01", -3)
    rule = make_rule()
    out = StringIO()
    call_command("run_rules", "--dry-run", stdout=out)
    assert "would be sent" in out.getvalue()
    assert "Replenish A-01 (-3)" in out.getvalue()
    assert Notification.objects.count() == 0
    out = StringIO()
    call_command("run_rules", "--rule", str(rule.pk), stdout=out)
    assert "1 sent" in out.getvalue()
    assert Notification.objects.count() == 1
    with pytest.raises(CommandError):
        call_command("run_rules", "--rule", "999999", stdout=StringIO())


@pytest.fixture
def admin_client(operator: Any) -> Client:
    client = Client()
    client.force_login(operator)
    return client


@pytest.mark.usefixtures("subscribed")
def test_admin_dry_run_action_and_history(admin_client: Client, recipient: Any, clock: Any) -> None:
    stock("WH1", "A-01", -3)
    rule = make_rule()
    response = admin_client.post(
        "/admin/messagecenter/notificationrule/", {"action": "dry_run", "_selected_action": [rule.pk]}
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert "Replenish A-01 (-3)" in page
    assert "Nothing was sent" in page
    assert Notification.objects.count() == 0
    response = admin_client.post(
        "/admin/messagecenter/notificationrule/", {"action": "run_now", "_selected_action": [rule.pk]}
    )
    assert response.status_code == 302
    assert Notification.objects.count() == 1
    page = admin_client.get(f"/admin/messagecenter/notificationrule/{rule.pk}/change/").content.decode()
    assert "Replenish" in page  # the change form renders, with its run history inline
    assert admin_client.get("/admin/messagecenter/notificationrule/").status_code == 200
    assert admin_client.get("/admin/messagecenter/notification/").status_code == 200
    assert admin_client.get("/admin/messagecenter/stocklevel/").status_code == 200
    assert admin_client.get("/admin/messagecenter/subscription/").status_code == 200


@pytest.mark.usefixtures("subscribed")
def test_admin_rejects_invalid_rule(admin_client: Client) -> None:
    from messagecenter.models import MessageType

    data = {
        "name": "bad",
        "enabled": "on",
        "content_type": ContentType.objects.get_for_model(StockLevel).pk,
        "filters": '{"quantity__regex": ".*"}',
        "message_type": MessageType.objects.get(code="replenish").pk,
        "scope": "",
        "scope_field": "warehouse",
        "title_template": "t",
        "body_template": "",
        "ttl_seconds": "",
        "interval_seconds": "60",
        "runs-TOTAL_FORMS": "0",
        "runs-INITIAL_FORMS": "0",
        "runs-MIN_NUM_FORMS": "0",
        "runs-MAX_NUM_FORMS": "0",
    }
    response = admin_client.post("/admin/messagecenter/notificationrule/add/", data)
    assert response.status_code == 200
    assert "not allowed" in response.content.decode()
    assert NotificationRule.objects.count() == 0
    response = admin_client.post(
        "/admin/messagecenter/notificationrule/add/", {**data, "filters": '{"quantity__lt": 0}'}
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    assert NotificationRule.objects.get().filters == {"quantity__lt": 0}


@pytest.mark.usefixtures("subscribed")
def test_admin_subscription_needs_exactly_one_subscriber(admin_client: Client, recipient: Any) -> None:
    from messagecenter.models import MessageType, Subscription

    type_id = MessageType.objects.get(code="replenish").pk
    response = admin_client.post(
        "/admin/messagecenter/subscription/add/", {"message_type": type_id, "scope": "WH9", "user": "", "group": ""}
    )
    assert response.status_code == 200
    assert "exactly one of user or group" in response.content.decode()
    response = admin_client.post(
        "/admin/messagecenter/subscription/add/",
        {"message_type": type_id, "scope": "WH9", "user": recipient.pk, "group": ""},
    )
    assert response.status_code == 302
    assert Subscription.objects.filter(scope="WH9").count() == 1


def test_demo_has_a_working_rule_and_notifications() -> None:
    from django.contrib.auth import get_user_model

    call_command("seed_demo", stdout=StringIO())
    call_command("seed_demo", stdout=StringIO())  # idempotent
    admin = get_user_model().objects.get(username="admin")
    rule = NotificationRule.objects.get(name="Negative stock means replenish")
    assert RuleMatch.objects.filter(rule=rule).count() == 1
    assert Notification.objects.count() == 2
    kinds = {item.kind for item in inbox_list(user=admin, limit=100).results}
    assert "notification" in kinds
    assert set(titles(admin)) >= {"Dock 3 closed for maintenance", "Replenish A-01-02: SKU-1002 at -3"}
