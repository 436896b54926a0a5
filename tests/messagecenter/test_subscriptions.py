"""Subscriptions and typed notifications: audience at send time,
scope isolation, dedupe, polling, exact TTL expiry, the sweep job and
idempotent fan-out. Each test checks PostgreSQL, then the read model."""

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from core.redis import get_redis, keyspace_flush
from messagecenter import keys as mc_keys
from messagecenter import services, tasks
from messagecenter.models import Notification, Subscription
from messagecenter.readmodel import to_ms
from messagecenter.selectors import inbox_counts, inbox_item_get, inbox_list
from tests.factories import UserFactory
from tests.messagecenter.conftest import make_group

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def replenish(db: None) -> Any:
    return services.message_type_create(code="replenish", name="Replenish", default_ttl_seconds=3600)


def notify(scope: str = "WH1", title: str = "Replenish A-01", **extra: Any) -> Notification:
    return services.notification_send(
        message_type="replenish", scope=scope, title=title, body_html="<p>Stock is <b>-3</b></p>", **extra
    )


def refs(user: Any, **kwargs: Any) -> list[str]:
    return [item.id for item in inbox_list(user=user, **kwargs).results]


def test_user_subscription_receives_notification_as_inbox_item(replenish: Any, recipient: Any, clock: Any) -> None:
    services.subscription_create(message_type="replenish", scope="WH1", user_id=recipient.pk)
    notification = notify()
    assert notification.recipients == 1
    assert list(Notification.objects.get(pk=notification.pk).audience) == [recipient.pk]
    item = inbox_item_get(user=recipient, item_id=f"n{notification.pk}")
    assert (item.kind, item.category, item.title, item.link, item.images) == (
        "notification",
        "system",
        "Replenish A-01",
        None,
        [],
    )
    assert item.summary == "Stock is -3"
    assert item.body_html == "<p>Stock is <b>-3</b></p>"
    assert inbox_counts(user=recipient)["by_category"]["system"] == 1
    services.inbox_mark_read(user=recipient, item_id=f"n{notification.pk}")
    assert inbox_counts(user=recipient)["unread"] == 0


def test_category_comes_from_the_message_type(recipient: Any, clock: Any) -> None:
    services.message_type_create(code="order", name="Order", category="transaction")
    services.subscription_create(message_type="order", scope="shop", user_id=recipient.pk)
    notification = services.notification_send(message_type="order", scope="shop", title="Paid", body_html="")
    assert refs(recipient, category="transaction") == [f"n{notification.pk}"]
    assert refs(recipient, category="system") == []


def test_scope_isolation(replenish: Any, recipient: Any, other_recipient: Any, clock: Any) -> None:
    services.subscription_create(message_type="replenish", scope="WH1", user_id=recipient.pk)
    services.subscription_create(message_type="replenish", scope="WH2", user_id=other_recipient.pk)
    wh1 = notify("WH1")
    wh2 = notify("WH2")
    assert refs(recipient) == [f"n{wh1.pk}"]
    assert refs(other_recipient) == [f"n{wh2.pk}"]
    assert notify("WH3").recipients == 0


def test_group_members_at_send_time_and_dedupe(
    replenish: Any, recipient: Any, other_recipient: Any, outsider: Any, clock: Any
) -> None:
    pickers = make_group("pickers", recipient, other_recipient)
    services.subscription_create(message_type="replenish", scope="WH1", group_id=pickers.pk)
    services.subscription_create(message_type="replenish", scope="WH1", user_id=recipient.pk)  # also direct
    first = notify(title="first")
    assert first.recipients == 2  # alice counted once
    clock.advance(seconds=1)
    services.user_group_add_members(group=pickers, user_ids=[outsider.pk])
    services.user_group_remove_members(group=pickers, user_ids=[other_recipient.pk])
    second = notify(title="second")
    assert second.recipients == 2  # alice and the newcomer
    assert refs(recipient) == [f"n{second.pk}", f"n{first.pk}"]
    assert refs(other_recipient) == [f"n{first.pk}"]  # left the group: keeps what was sent
    assert refs(outsider) == [f"n{second.pk}"]  # joined later: no earlier notifications


def test_subscriber_sets_mirrored_in_redis(replenish: Any, recipient: Any, clock: Any) -> None:
    group = make_group("pickers", recipient)
    by_user = services.subscription_create(message_type="replenish", scope="WH1", user_id=recipient.pk)
    services.subscription_create(message_type="replenish", scope="WH1", group_id=group.pk)
    key = mc_keys.subscribers(replenish.pk, "WH1")
    assert get_redis().smembers(key) == {f"u{recipient.pk}".encode(), f"g{group.pk}".encode()}
    services.subscription_delete(subscription=by_user)
    assert get_redis().smembers(key) == {f"g{group.pk}".encode()}
    # An edit moving it to another scope leaves the old set.
    sub = Subscription.objects.get(group=group)
    sub.scope = "WH2"
    sub.save()
    assert get_redis().smembers(key) == set()
    assert get_redis().smembers(mc_keys.subscribers(replenish.pk, "WH2")) == {f"g{group.pk}".encode()}


def test_polling_with_since(replenish: Any, recipient: Any, clock: Any) -> None:
    services.subscription_create(message_type="replenish", scope="WH1", user_id=recipient.pk)
    old = notify(title="old")
    last_fetch = clock.now
    clock.advance(seconds=5)
    new = notify(title="new")
    assert refs(recipient, since=last_fetch) == [f"n{new.pk}"]
    assert refs(recipient) == [f"n{new.pk}", f"n{old.pk}"]


def test_ttl_expiry_is_exact_in_lists_and_counts(replenish: Any, recipient: Any, clock: Any) -> None:
    services.subscription_create(message_type="replenish", scope="WH1", user_id=recipient.pk)
    short = notify(title="short", ttl_seconds=60)
    default = notify(title="default")  # the type's 3600 s
    assert default.expire_at == default.created_at + __import__("datetime").timedelta(seconds=3600)
    clock.advance(seconds=59, microseconds=999_000)
    assert refs(recipient) == [f"n{default.pk}", f"n{short.pk}"]
    assert inbox_counts(user=recipient)["unread"] == 2
    clock.advance(microseconds=1000)  # exactly expire_at
    assert refs(recipient) == [f"n{default.pk}"]
    assert inbox_counts(user=recipient)["unread"] == 1
    with pytest.raises(Exception, match="No such item"):
        inbox_item_get(user=recipient, item_id=f"n{short.pk}")


def test_sweep_removes_expired_keeps_live_in_bounded_batches(
    replenish: Any, recipient: Any, other_recipient: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from messagecenter.services import notifications as module

    monkeypatch.setattr(module, "SWEEP_ITEMS_LIMIT", 2)  # several bounded calls per user
    monkeypatch.setattr(module, "SWEEP_USERS_BATCH", 1)
    for user in (recipient, other_recipient):
        services.subscription_create(message_type="replenish", scope="WH1", user_id=user.pk)
    expiring = [notify(title=f"e{i}", ttl_seconds=60) for i in range(5)]
    live = notify(title="live")
    redis = get_redis()
    notif_key = mc_keys.user_notifications(recipient.pk)
    assert redis.zcard(notif_key) == 6
    assert redis.smembers(mc_keys.notification_holders()) == {
        str(recipient.pk).encode(),
        str(other_recipient.pk).encode(),
    }
    clock.advance(seconds=61)
    # Nobody read since: the sweep, not a read, removes them from the inbox zsets.
    assert redis.zcard(mc_keys.inbox(recipient.pk)) == 6
    done = services.notification_sweep()
    assert done == {"users": 2, "removed": 10, "details_freed": 5}
    assert redis.zcard(notif_key) == 1
    assert redis.zcard(mc_keys.inbox(recipient.pk)) == 1
    assert redis.zcard(mc_keys.inbox_expiry(recipient.pk)) == 1
    # What the sweep removed leaves the arrivals too: only the live one waits to be placed.
    assert redis.zrange(mc_keys.inbox_arrivals(recipient.pk), 0, -1) == redis.zrange(mc_keys.inbox(recipient.pk), 0, -1)
    assert redis.hexists(mc_keys.item_detail(), f"n{live.pk}")
    assert not any(redis.hexists(mc_keys.item_detail(), f"n{n.pk}") for n in expiring)
    assert Notification.objects.filter(details_freed=True).count() == 5
    assert refs(recipient) == [f"n{live.pk}"]
    assert redis.hget(mc_keys.inbox_counters(recipient.pk), "system") == b"1"  # placed by that read, counted once
    # Idempotent; a holder with nothing left leaves the index.
    clock.advance(seconds=3600)
    assert services.notification_sweep()["removed"] == 2
    assert services.notification_sweep() == {"users": 0, "removed": 0, "details_freed": 0}
    assert redis.smembers(mc_keys.notification_holders()) == set()
    assert tasks.notifications_sweep_task() == {"users": 0, "removed": 0, "details_freed": 0}


def test_fanout_is_chunked_and_idempotent(
    replenish: Any, recipient: Any, other_recipient: Any, clock: Any, settings: Any
) -> None:
    settings.MESSAGECENTER_FANOUT_CHUNK = 1
    users = [recipient, other_recipient, *(UserFactory() for _ in range(3))]
    group = make_group("pickers", *users)
    services.subscription_create(message_type="replenish", scope="WH1", group_id=group.pk)
    notification = notify()
    assert notification.recipients == 5
    services.inbox_mark_read(user=recipient, item_id=f"n{notification.pk}")
    before = {u.pk: inbox_counts(user=u)["unread"] for u in users}
    assert tasks.notification_deliver_task(notification.pk) == 5  # chunks, all re-run
    assert tasks.notification_fanout_chunk_task(notification.pk, 0) == 1
    assert {u.pk: inbox_counts(user=u)["unread"] for u in users} == before
    assert all(refs(u) == [f"n{notification.pk}"] for u in users)
    assert get_redis().zcard(mc_keys.user_notifications(recipient.pk)) == 1


def test_withdraw_removes_from_every_inbox(replenish: Any, recipient: Any, other_recipient: Any, clock: Any) -> None:
    for user in (recipient, other_recipient):
        services.subscription_create(message_type="replenish", scope="WH1", user_id=user.pk)
    notification = notify()
    assert services.notification_withdraw(notification=notification) is True
    assert services.notification_withdraw(notification=notification) is False
    assert refs(recipient) == refs(other_recipient) == []
    assert inbox_counts(user=recipient)["unread"] == 0
    tasks.notification_deliver_task(notification.pk)  # a late task changes nothing
    assert refs(recipient) == []


def test_bad_inputs_change_nothing(replenish: Any, recipient: Any, clock: Any) -> None:
    from core.api.errors import ApplicationError

    services.subscription_create(message_type="replenish", scope="WH1", user_id=recipient.pk)
    for kwargs in (
        {"message_type": "nope"},
        {"ttl_seconds": 0},
        {"ttl_seconds": -5},
        {"ttl_seconds": 1.5},
        {"ttl_seconds": True},
        {"ttl_seconds": 10**9},
        {"scope": ""},
        {"title": ""},
    ):
        args: dict[str, Any] = {"message_type": "replenish", "scope": "WH1", "title": "t", "body_html": "", **kwargs}
        with pytest.raises(ApplicationError):
            services.notification_send(**args)
    assert Notification.objects.count() == 0
    assert refs(recipient) == []


def test_rebuild_restores_subscriptions_and_notifications(
    replenish: Any, recipient: Any, other_recipient: Any, clock: Any
) -> None:
    services.subscription_create(message_type="replenish", scope="WH1", user_id=recipient.pk)
    services.subscription_create(message_type="replenish", scope="WH1", user_id=other_recipient.pk)
    kept = notify(title="kept")
    hidden = notify(title="hidden")
    withdrawn = notify(title="withdrawn")
    services.notification_withdraw(notification=withdrawn)
    services.inbox_hide(user=recipient, item_id=f"n{hidden.pk}")
    expired = notify(title="expired", ttl_seconds=1)
    clock.advance(seconds=2)
    assert refs(recipient) == [f"n{kept.pk}"]
    keyspace_flush()
    call_command("messagecenter_rebuild", "--warm", stdout=StringIO())
    assert refs(recipient) == [f"n{kept.pk}"]
    # (Sent within the same millisecond: their order is the members' order, which the ids decide.)
    assert sorted(refs(other_recipient)) == sorted([f"n{hidden.pk}", f"n{kept.pk}"])
    assert get_redis().smembers(mc_keys.subscribers(replenish.pk, "WH1")) == {
        f"u{recipient.pk}".encode(),
        f"u{other_recipient.pk}".encode(),
    }
    assert get_redis().zscore(mc_keys.user_notifications(recipient.pk), f"n{expired.pk}") is None
    assert to_ms(kept.expire_at) == get_redis().zscore(mc_keys.inbox_expiry(recipient.pk), kept_member(kept))


def kept_member(notification: Notification) -> str:
    from messagecenter.items import notification_entry

    return notification_entry(notification).member


def test_sweep_script_keys_share_one_cluster_slot() -> None:
    from redis.crc import key_slot

    from messagecenter.readmodel.scripts import SweepOp, inbox_call

    script_keys = inbox_call(SweepOp(limit=10), user_id=42, now_ms=0, months=["202611", "202612"]).keys
    assert mc_keys.user_notifications(42) in script_keys
    assert len({key_slot(k.encode()) for k in script_keys}) == 1
