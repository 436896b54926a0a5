"""check_redis areas of the message centre, on the real Redis: drift introduced by
hand (a key deleted, a member removed, a stale member added, a detail changed)
is found, ``repair`` mends it through the mirrors, and a second check is clean.
PostgreSQL is never touched by a repair."""

import json
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from core.redis import get_redis
from durability.drift import Finding, check_run, drift_checks
from messagecenter import keys as mc_keys
from messagecenter import services
from messagecenter.models import Message, Subscription
from messagecenter.selectors import inbox_list
from tests.messagecenter.conftest import make_group, send

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_grace(settings: Any) -> None:
    # Deliveries run eagerly here: nothing is waiting for its task.
    settings.MESSAGECENTER_CHECK_GRACE_SECONDS = 0


def find(area: str) -> list[Finding]:
    return drift_checks()[area].find()


def repair_and_recheck(area: str) -> None:
    """Repair what the area finds, then it is clean (and a run records it as repaired)."""
    found = find(area)
    assert found
    result = check_run(repair=True, areas=[area])
    assert result.drift_count == len(found)
    assert result.repaired_count == len(found)
    assert result.remaining_count == 0
    assert find(area) == []
    assert check_run(repair=False, areas=[area]).drift_count == 0


def refs(user: Any) -> list[str]:
    return [item.id for item in inbox_list(user=user).results]


# --- bulletins -----------------------------------------------------------------


def test_bulletin_config_member_deleted_and_stray_added(recipient: Any) -> None:
    group = make_group("vip", recipient)
    bulletin = services.bulletin_create(
        title="B", body_html="<p>x</p>", display_time=timezone.now(), group_ids=[group.pk]
    )
    assert refs(recipient) == [bulletin.ref]
    assert find("bulletins") == []
    redis = get_redis()
    redis.zrem(mc_keys.bulletin_config(), f"{bulletin.pk}_{group.pk}")
    redis.zadd(mc_keys.bulletin_config(), {f"{bulletin.pk}_424242": 1})
    [finding] = find("bulletins")
    assert finding.member == bulletin.ref
    assert f"config lacks {bulletin.pk}_{group.pk}" in finding.detail
    assert f"config or change log has stray {bulletin.pk}_424242" in finding.detail
    repair_and_recheck("bulletins")
    members = {m.decode() for m in redis.zrange(mc_keys.bulletin_config(), 0, -1)}
    assert members == {f"{bulletin.pk}_{group.pk}"}
    assert refs(recipient) == [bulletin.ref]


def test_bulletin_missing_from_the_change_log(recipient: Any, other_recipient: Any) -> None:
    """A config the log lost would never reach a reader past the log's floor:
    the check names it and the repair logs it again, so that reader merges it."""
    services.bulletin_create(title="First", body_html="", display_time=timezone.now())
    assert len(refs(recipient)) == 1
    # Shown from a minute ago: a display time the reader's merge already passed.
    later = services.bulletin_create(title="Later", body_html="", display_time=timezone.now() - timedelta(minutes=1))
    redis = get_redis()
    redis.zrem(mc_keys.bulletin_changes(), f"{later.pk}_0")
    assert later.ref not in refs(recipient)  # the incremental merge missed it
    [finding] = find("bulletins")
    assert (finding.member, finding.detail) == (later.ref, f"change log lacks {later.pk}_0")
    repair_and_recheck("bulletins")
    assert redis.zscore(mc_keys.bulletin_changes(), f"{later.pk}_0") is not None
    assert later.ref in refs(recipient)
    assert later.ref in refs(other_recipient)


def test_bulletin_detail_changed(recipient: Any) -> None:
    bulletin = services.bulletin_create(title="Everyone", body_html="<p>hi</p>", display_time=timezone.now())
    redis = get_redis()
    raw = json.loads(redis.hget(mc_keys.item_detail(), bulletin.ref))
    redis.hset(mc_keys.item_detail(), bulletin.ref, json.dumps({**raw, "title": "Tampered"}))
    [finding] = find("bulletins")
    assert finding.detail == "item detail differs"
    repair_and_recheck("bulletins")
    assert json.loads(redis.hget(mc_keys.item_detail(), bulletin.ref))["title"] == "Everyone"
    assert inbox_list(user=recipient).results[0].title == "Everyone"


def test_bulletin_gone_from_postgres_but_left_in_redis(recipient: Any) -> None:
    kept = services.bulletin_create(title="Kept", body_html="", display_time=timezone.now())
    gone = services.bulletin_create(title="Gone", body_html="", display_time=timezone.now())
    assert sorted(refs(recipient)) == sorted([kept.ref, gone.ref])
    redis = get_redis()
    snapshot = {
        "config": redis.zscore(mc_keys.bulletin_config(), f"{gone.pk}_0"),
        "detail": redis.hget(mc_keys.bulletin_detail(), f"{gone.pk}_0"),
        "item": redis.hget(mc_keys.item_detail(), gone.ref),
    }
    services.bulletin_delete(bulletin=gone)
    # The delete's mirror was lost: put back what it removed.
    redis.zadd(mc_keys.bulletin_config(), {f"{gone.pk}_0": snapshot["config"]})
    redis.hset(mc_keys.bulletin_detail(), f"{gone.pk}_0", snapshot["detail"])
    redis.hset(mc_keys.item_detail(), gone.ref, snapshot["item"])
    [finding] = find("bulletins")
    assert (finding.member, finding.detail) == (gone.ref, "bulletin not in PostgreSQL but still in Redis")
    repair_and_recheck("bulletins")
    assert redis.zscore(mc_keys.bulletin_config(), f"{gone.pk}_0") is None
    assert not redis.hexists(mc_keys.item_detail(), gone.ref)
    assert refs(recipient) == [kept.ref]


# --- item details --------------------------------------------------------------


def test_message_detail_deleted_and_changed(operator: Any, recipient: Any, settings: Any) -> None:
    settings.MESSAGECENTER_PUSH_THRESHOLD = 10
    first = send(operator, to={"users": [recipient]}, title="First")
    second = send(operator, to={"users": [recipient]}, title="Second")
    assert find("item_details") == []
    redis = get_redis()
    redis.hdel(mc_keys.item_detail(), first.ref)
    raw = json.loads(redis.hget(mc_keys.item_detail(), second.ref))
    redis.hset(mc_keys.item_detail(), second.ref, json.dumps({**raw, "body_html": "<p>forged</p>"}))
    found = {f.member: f.detail for f in find("item_details")}
    assert found == {first.ref: "detail missing", second.ref: "detail differs from PostgreSQL"}
    repair_and_recheck("item_details")
    assert {i.id: i.title for i in inbox_list(user=recipient).results} == {first.ref: "First", second.ref: "Second"}


def test_a_pushed_detail_is_missing_only_while_a_recipient_is_held(
    operator: Any, recipient: Any, settings: Any
) -> None:
    """A pushed message's detail comes back with the fill of a recipient who
    returns: missing while no recipient's part is in Redis, it is no drift;
    once one is held, it is (and the repair writes it back)."""
    from messagecenter.fill import inbox_fill

    settings.MESSAGECENTER_PUSH_THRESHOLD = 10
    settings.MESSAGECENTER_SELF_HEALING = True
    message = send(operator, to={"users": [recipient]}, title="Pushed")
    redis = get_redis()
    redis.delete(mc_keys.inbox_state(recipient.pk))  # the recipient's part is not held
    redis.hdel(mc_keys.item_detail(), message.ref)
    assert find("item_details") == []
    assert inbox_fill(user_id=recipient.pk)  # the recipient comes back: the fill brings the detail
    assert redis.hexists(mc_keys.item_detail(), message.ref)
    redis.hdel(mc_keys.item_detail(), message.ref)
    assert {f.member: f.detail for f in find("item_details")} == {message.ref: "detail missing"}
    repair_and_recheck("item_details")


def test_detail_of_retracted_and_deleted_messages_must_go(operator: Any, recipient: Any, settings: Any) -> None:
    settings.MESSAGECENTER_PUSH_THRESHOLD = 10
    retracted = send(operator, to={"users": [recipient]})
    deleted = send(operator, to={"users": [recipient]})
    redis = get_redis()
    retracted_detail = redis.hget(mc_keys.item_detail(), retracted.ref)
    deleted_detail = redis.hget(mc_keys.item_detail(), deleted.ref)
    services.message_retract(message=retracted)
    Message.objects.filter(pk=deleted.pk).delete()
    assert refs(recipient) == []
    # Lost removals: the details come back.
    redis.hset(mc_keys.item_detail(), mapping={retracted.ref: retracted_detail, deleted.ref: deleted_detail})
    found = {f.member: f.detail for f in find("item_details")}
    assert found == {
        retracted.ref: "stale detail: message retracted",
        deleted.ref: "stale detail: deleted in PostgreSQL",
    }
    repair_and_recheck("item_details")
    assert redis.hmget(mc_keys.item_detail(), [retracted.ref, deleted.ref]) == [None, None]


def test_notification_detail_and_withdrawn(recipient: Any) -> None:
    services.message_type_create(code="stock", name="Stock", default_ttl_seconds=3600)
    services.subscription_create(message_type="stock", scope="WH1", user_id=recipient.pk)
    live = services.notification_send(message_type="stock", scope="WH1", title="Low", body_html="")
    withdrawn = services.notification_send(message_type="stock", scope="WH1", title="Old", body_html="")
    redis = get_redis()
    stale = redis.hget(mc_keys.item_detail(), withdrawn.ref)
    services.notification_withdraw(notification=withdrawn)
    assert find("item_details") == []
    redis.hdel(mc_keys.item_detail(), live.ref)
    redis.hset(mc_keys.item_detail(), withdrawn.ref, stale)
    found = {f.member: f.detail for f in find("item_details")}
    assert found == {live.ref: "detail missing", withdrawn.ref: "stale detail: notification withdrawn"}
    repair_and_recheck("item_details")
    assert refs(recipient) == [live.ref]


def test_young_notifications_wait_for_their_task(recipient: Any, settings: Any) -> None:
    services.message_type_create(code="stock", name="Stock", default_ttl_seconds=3600)
    services.subscription_create(message_type="stock", scope="WH1", user_id=recipient.pk)
    notification = services.notification_send(message_type="stock", scope="WH1", title="Low", body_html="")
    get_redis().hdel(mc_keys.item_detail(), notification.ref)
    settings.MESSAGECENTER_CHECK_GRACE_SECONDS = 60
    assert find("item_details") == []
    settings.MESSAGECENTER_CHECK_GRACE_SECONDS = 0
    assert [f.member for f in find("item_details")] == [notification.ref]


# --- subscribers ---------------------------------------------------------------


def test_subscriber_sets_missing_member_and_stale_set(recipient: Any, other_recipient: Any) -> None:
    mtype = services.message_type_create(code="stock", name="Stock")
    group = make_group("pickers", other_recipient)
    services.subscription_create(message_type="stock", scope="WH1", user_id=recipient.pk)
    services.subscription_create(message_type="stock", scope="WH1", group_id=group.pk)
    assert find("subscribers") == []
    redis = get_redis()
    redis.srem(mc_keys.subscribers(mtype.pk, "WH1"), f"g{group.pk}")
    redis.sadd(mc_keys.subscribers(mtype.pk, "WH:9"), f"u{recipient.pk}")  # a scope nobody subscribes to
    found = {f.key: f.detail for f in find("subscribers")}
    assert found == {
        mc_keys.subscribers(mtype.pk, "WH1"): f"missing g{group.pk}",
        mc_keys.subscribers(mtype.pk, "WH:9"): f"extra u{recipient.pk}",
    }
    repair_and_recheck("subscribers")
    assert redis.smembers(mc_keys.subscribers(mtype.pk, "WH1")) == {
        f"u{recipient.pk}".encode(),
        f"g{group.pk}".encode(),
    }
    assert not redis.exists(mc_keys.subscribers(mtype.pk, "WH:9"))
    assert Subscription.objects.count() == 2
