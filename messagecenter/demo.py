"""Demo data of the message centre: groups, memberships, bulletins, one
message of each category (one pushed to a group, one to everyone), and seed
003's notifications (a "replenish" type the admin subscribes to in WH1, the
demo StockLevel table with a negative row, a rule turning it into a
notification, and one notification sent by hand). Idempotent: items are
recognised by title and not sent twice."""

from datetime import timedelta
from typing import Any, TextIO

from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django.utils import timezone

from messagecenter import services
from messagecenter.models import (
    Bulletin,
    Message,
    MessageType,
    Notification,
    NotificationRule,
    StockLevel,
    Subscription,
    UserGroup,
)

GROUPS = {"staff-news": ["alice", "bob"], "vip": ["alice", "carol"]}


def _group(name: str) -> UserGroup:
    group = UserGroup.objects.filter(name=name).first()
    return group if group is not None else services.user_group_create(name=name)


def seed(stdout: TextIO) -> None:
    User = get_user_model()
    users = {u.username: u for u in User.objects.filter(username__in=["alice", "bob", "carol", "admin"])}
    if not {"alice", "bob", "carol"} <= set(users):
        stdout.write("  messagecenter: demo users missing, skipped\n")
        return
    groups = {name: _group(name) for name in GROUPS}
    for name, members in GROUPS.items():
        services.user_group_add_members(group=groups[name], user_ids=[users[m].pk for m in members])
    now = timezone.now()
    sender = users.get("admin")

    if not Bulletin.objects.filter(title="Welcome to the message centre").exists():
        services.bulletin_create(
            title="Welcome to the message centre",
            body_html="<p>Bulletins, messages and announcements, all in one inbox.</p>",
            display_time=now,
        )
    if not Bulletin.objects.filter(title="Staff news: new office hours").exists():
        services.bulletin_create(
            title="Staff news: new office hours",
            body_html="<p>From Monday the office opens at <strong>8:00</strong>.</p>",
            display_time=now,
            expire_at=now + timedelta(days=30),
            group_ids=[groups["staff-news"].pk],
        )

    messages = [
        ("system", "Your account is ready", {"user_ids": [users["alice"].pk, users["bob"].pk]}),
        ("promotion", "VIP week: 30% off", {"group_ids": [groups["vip"].pk]}),
        ("transaction", "Order #1042 has shipped", {"user_ids": [users["alice"].pk]}),
        ("interaction", "Carol mentioned everyone in #general", {"everyone": True}),
    ]
    for category, title, audience in messages:
        if Message.objects.filter(title=title).exists():
            continue
        services.message_send(
            sender=sender,
            category=category,
            title=title,
            body_html=f"<p>{title}.</p><p><a href='https://example.com/'>Details</a></p>",
            link="https://example.com/",
            images=["https://picsum.photos/seed/mc/640/320"] if category == "promotion" else [],
            **audience,  # type: ignore[arg-type]
        )
    stdout.write("  messagecenter: groups staff-news (alice, bob), vip (alice, carol); 2 bulletins, 4 messages\n")
    if sender is not None:
        _seed_notifications(stdout, operator=sender)


STOCK = [("WH1", "A-01-01", "SKU-1001", 40), ("WH1", "A-01-02", "SKU-1002", -3), ("WH2", "B-02-01", "SKU-2001", 12)]


def _seed_notifications(stdout: TextIO, *, operator: Any) -> None:
    """The subscription example: the operator subscribes to "replenish" in WH1; a rule
    turns negative stock into a notification; one notification sent by hand."""
    replenish = MessageType.objects.filter(code="replenish").first() or services.message_type_create(
        code="replenish", name="Replenish a location"
    )
    if not Subscription.objects.filter(message_type=replenish, scope="WH1", user=operator).exists():
        services.subscription_create(message_type="replenish", scope="WH1", user_id=operator.pk)
    for warehouse, location, sku, quantity in STOCK:
        StockLevel.objects.get_or_create(
            warehouse=warehouse, location=location, sku=sku, defaults={"quantity": quantity}
        )
    rule = NotificationRule.objects.filter(name="Negative stock means replenish").first()
    if rule is None:
        rule = NotificationRule.objects.create(
            name="Negative stock means replenish",
            content_type=ContentType.objects.get_for_model(StockLevel),
            filters={"quantity__lt": 0},
            message_type=replenish,
            scope_field="warehouse",
            title_template="Replenish {{ object.location }}: {{ object.sku }} at {{ object.quantity }}",
            body_template="<p>Stock of <b>{{ object.sku }}</b> at {{ object.location }} is {{ object.quantity }}.</p>",
            interval_seconds=300,
        )
    services.rule_run(rule=rule)  # idempotent: a matching object notifies once
    title = "Dock 3 closed for maintenance"
    if not Notification.objects.filter(title=title).exists():
        services.notification_send(
            message_type="replenish",
            scope="WH1",
            title=title,
            body_html="<p>Use dock 4 for replenishment until 14:00.</p>",
        )
    stdout.write("  messagecenter: type replenish, admin subscribed in WH1, 1 rule (negative stock), 2 notifications\n")
