"""Demo data of the message centre: groups, memberships, bulletins and one
message of each category (one pushed to a group, one to everyone). Idempotent:
items are recognised by title and not sent twice."""

from datetime import timedelta
from typing import TextIO

from django.contrib.auth import get_user_model
from django.utils import timezone

from messagecenter import services
from messagecenter.models import Bulletin, Message, UserGroup

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
