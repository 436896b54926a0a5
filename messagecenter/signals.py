"""Receivers that mirror committed changes into the Redis read model.

Connected in ``MessagecenterConfig.ready()``. Each one skips saves that
changed nothing the read model shows and defers the Redis write to
``transaction.on_commit``: PostgreSQL commits first, Redis follows.
Membership writes go through services, which send ``memberships_changed``
once per batch (no receiver on the membership rows: a bulk change should
not become thousands of callbacks).
"""

import logging
from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_init, post_save, pre_delete
from django.dispatch import Signal
from django.utils import timezone
from redis.exceptions import RedisError

from core import outbox
from messagecenter.readmodel import InboxEntry, publish, to_ms

logger = logging.getLogger(__name__)

memberships_changed = Signal()  # kwargs: user_ids

BULLETIN_FIELDS = ("title", "body_html", "display_time", "expire_at")
MESSAGE_FIELDS = ("category", "title", "summary", "body_html", "link", "images", "expire_at", "status")


def _snapshot(instance: Any, fields: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(instance.__dict__.get(name) for name in fields)


MIRROR_TOPIC = "messagecenter.mirror"


def mirror_after_commit(name: str, *args: Any, **at_hand: Any) -> None:
    """Run mirror ``name`` after commit; if Redis fails, the outbox keeps it.

    PostgreSQL has committed by then, so a Redis failure must not lose the
    change: it is recorded in the outbox (``{"name", "args"}``, args as JSON)
    and replayed once Redis answers; ``manage.py messagecenter_rebuild``
    restores everything if even that is lost. A later mirror may run before
    the replay of an earlier one: every mirror reloads its rows from
    PostgreSQL or removes a given entry, so the order does not change the result.
    ``at_hand`` (objects the caller holds) go to the attempt at commit only,
    which may write from them instead of reloading; the outbox keeps ``name``
    and ``args``, so a replay reloads.
    """

    def run() -> None:
        try:
            MIRRORS[name](*args, **at_hand)
        except RedisError:
            logger.warning("could not mirror %s%r into redis; queued in the outbox", name, args)
            outbox.enqueue_after_failure(topic=MIRROR_TOPIC, payload={"name": name, "args": list(args)})

    transaction.on_commit(run)


def replay_mirror(payload: dict[str, Any], user_id: int | None) -> None:
    """Outbox handler of ``messagecenter.mirror`` (each mirror is idempotent)."""
    MIRRORS[str(payload["name"])](*payload["args"])


# --- memberships ---------------------------------------------------------------


def mirror_user_groups(user_ids: list[int]) -> None:
    from messagecenter.models import UserGroupMembership

    groups: dict[int, list[int]] = {int(u): [] for u in user_ids}
    rows = UserGroupMembership.objects.filter(user_id__in=list(groups)).values_list("user_id", "group_id")
    for user_id, group_id in rows:
        groups[user_id].append(group_id)
    publish.user_groups_replace(groups_by_user=groups, now_ms=to_ms(timezone.now()))


def on_memberships_changed(sender: Any, user_ids: list[int], **kwargs: Any) -> None:
    mirror_after_commit("user_groups", [int(u) for u in user_ids])


def on_group_pre_delete(sender: Any, instance: Any, **kwargs: Any) -> None:
    # The cascade removes memberships and bulletin links without signals:
    # remember whom and what to refresh.
    member_ids = list(instance.memberships.values_list("user_id", flat=True))
    bulletin_ids = list(instance.bulletins.values_list("pk", flat=True))

    if member_ids:
        mirror_after_commit("user_groups", member_ids)
    for bulletin_id in bulletin_ids:
        mirror_after_commit("bulletin", bulletin_id, True)


# --- bulletins -----------------------------------------------------------------


def mirror_bulletin(bulletin_id: int, edit: bool, *, bulletin: Any = None) -> None:
    """Write a bulletin's config and detail, reloaded from PostgreSQL; or from
    ``bulletin`` (the instance at hand, at commit) when ``bulletin_create``
    vouched for its whole state and nothing changed it since."""
    from messagecenter.items import bulletin_detail, bulletin_entry
    from messagecenter.models import Bulletin

    group_ids = getattr(bulletin, "_mc_written", None)
    if group_ids is None or _snapshot(bulletin, BULLETIN_FIELDS) != getattr(bulletin, "_mc_snapshot", None):
        # Not created by the service, or its groups or fields changed since
        # (unsaved, or saved: that save has its own mirror, run after this one).
        bulletin = Bulletin.objects.filter(pk=bulletin_id).first()
        if bulletin is None:
            return
        group_ids = list(bulletin.groups.values_list("pk", flat=True))
    publish.bulletin_put(
        bulletin_id=bulletin.pk,
        entry=bulletin_entry(bulletin),
        detail=bulletin_detail(bulletin),
        group_ids=group_ids,
        now_ms=to_ms(timezone.now()),
        edit=edit,
    )


def bulletin_created(bulletin: Any, *, group_ids: list[int]) -> None:
    """``bulletin_create`` has written a new bulletin and all of its groups:
    its mirror at commit may write this state to Redis instead of reloading it."""
    bulletin._mc_written = list(group_ids)


def on_bulletin_init(sender: Any, instance: Any, **kwargs: Any) -> None:
    instance._mc_snapshot = _snapshot(instance, BULLETIN_FIELDS)


def on_bulletin_saved(sender: Any, instance: Any, created: bool, raw: bool = False, **kwargs: Any) -> None:
    if raw:
        return
    if not created and _snapshot(instance, BULLETIN_FIELDS) == getattr(instance, "_mc_snapshot", None):
        return
    instance._mc_snapshot = _snapshot(instance, BULLETIN_FIELDS)
    if created:
        instance._mc_created = True
    bulletin_id = instance.pk

    transaction.on_commit(lambda: setattr(instance, "_mc_created", False))
    # A new one goes with the instance: the publish path writes Redis from it
    # when bulletin_create vouched for its whole state (no reload).
    mirror_after_commit("bulletin", bulletin_id, not created, **({"bulletin": instance} if created else {}))


def on_bulletin_groups_changed(
    sender: Any, instance: Any, action: str, reverse: bool = False, pk_set: Any = None, **kwargs: Any
) -> None:
    from messagecenter.models import Bulletin

    if reverse:
        # Changed from a group's side (group.bulletins.add/remove/clear):
        # each bulletin concerned reloads after commit.
        if action == "pre_clear":
            pk_set = set(instance.bulletins.values_list("pk", flat=True))
        elif action not in {"post_add", "post_remove"}:
            return
        for bulletin_id in sorted(pk_set or ()):
            mirror_after_commit("bulletin", bulletin_id, True)
        return
    if action not in {"post_add", "post_remove", "post_clear"}:
        return
    if getattr(instance, "_mc_created", False):
        # A new bulletin is mirrored once, groups included, after commit;
        # groups changed after bulletin_create vouched for them: reload.
        instance._mc_written = None
        return
    if isinstance(instance, Bulletin):
        mirror_after_commit("bulletin", instance.pk, True)


def on_bulletin_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    from messagecenter.items import bulletin_entry

    mirror_after_commit("bulletin_delete", instance.pk, _entry_args(bulletin_entry(instance)))


# --- messages ------------------------------------------------------------------


def _entry_args(entry: InboxEntry) -> list[Any]:
    return [entry.ref, entry.category, entry.month, entry.offset, entry.score, entry.expire_ms]


def delete_bulletin(bulletin_id: int, entry_args: list[Any]) -> None:
    publish.bulletin_delete(bulletin_id=bulletin_id, entry=InboxEntry(*entry_args), now_ms=to_ms(timezone.now()))


def remove_item(entry_args: list[Any], pull_member: str) -> None:
    publish.item_remove(entry=InboxEntry(*entry_args), pull_member=pull_member)


def _remove_message_after_commit(message: Any) -> None:
    from messagecenter.items import message_entry
    from messagecenter.models import DeliveryMode

    entry = message_entry(message)
    pull_member = publish.pull_member(entry, everyone=message.everyone) if message.delivery == DeliveryMode.PULL else ""
    mirror_after_commit("remove_item", _entry_args(entry), pull_member)


def refresh_message_detail(message_id: int) -> None:
    from messagecenter.items import message_detail
    from messagecenter.models import Message, MessageStatus

    message = Message.objects.filter(pk=message_id).first()
    if message is None or message.status in {MessageStatus.QUEUED, MessageStatus.RETRACTED, MessageStatus.EXPIRED}:
        return
    publish.item_detail_put(ref=message.ref, detail=message_detail(message))


def on_message_init(sender: Any, instance: Any, **kwargs: Any) -> None:
    instance._mc_snapshot = _snapshot(instance, MESSAGE_FIELDS)


def on_message_saved(sender: Any, instance: Any, created: bool, raw: bool = False, **kwargs: Any) -> None:
    from messagecenter.models import MessageStatus

    before = getattr(instance, "_mc_snapshot", None)
    now = _snapshot(instance, MESSAGE_FIELDS)
    instance._mc_snapshot = now
    if raw or created or before == now:
        return  # a new message is delivered by its task, enqueued by message_send
    if instance.status == MessageStatus.RETRACTED:
        if before is not None and before[-1] != MessageStatus.RETRACTED:
            _remove_message_after_commit(instance)
        return
    mirror_after_commit("message_detail", instance.pk)


def on_message_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    _remove_message_after_commit(instance)


def on_image_changed(sender: Any, instance: Any, raw: bool = False, **kwargs: Any) -> None:
    if raw:
        return
    mirror_after_commit("message_detail", instance.message_id)


# --- subscriptions and notifications (seed 003) ------------------------------------


def mirror_subscribers(message_type_id: int, scope: str) -> None:
    from messagecenter.services.notifications import subscription_mirror

    subscription_mirror(message_type_id=message_type_id, scope=scope)


def on_subscription_init(sender: Any, instance: Any, **kwargs: Any) -> None:
    instance._mc_snapshot = (instance.__dict__.get("message_type_id"), instance.__dict__.get("scope"))


def _subscription_pairs(instance: Any) -> set[tuple[int, str]]:
    pairs = {(instance.message_type_id, instance.scope)}
    before = getattr(instance, "_mc_snapshot", None)
    if before is not None and before[0] is not None:
        pairs.add(before)  # an edit moving it to another (type, scope) leaves the old set
    return pairs


def on_subscription_saved(sender: Any, instance: Any, raw: bool = False, **kwargs: Any) -> None:
    if raw:
        return
    # Each refresh reloads the (type, scope) from PostgreSQL: idempotent and order-free.
    for type_id, scope in _subscription_pairs(instance):
        mirror_after_commit("subscribers", type_id, scope)
    instance._mc_snapshot = (instance.message_type_id, instance.scope)


def on_subscription_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    for type_id, scope in _subscription_pairs(instance):
        mirror_after_commit("subscribers", type_id, scope)


def on_notification_init(sender: Any, instance: Any, **kwargs: Any) -> None:
    instance._mc_withdrawn = instance.__dict__.get("withdrawn")


def on_notification_saved(sender: Any, instance: Any, created: bool, raw: bool = False, **kwargs: Any) -> None:
    before = getattr(instance, "_mc_withdrawn", None)
    instance._mc_withdrawn = instance.withdrawn
    if raw or created or before is None or before or not instance.withdrawn:
        return  # a new notification is delivered by its task, enqueued by notification_send
    from messagecenter.items import notification_entry

    mirror_after_commit("remove_item", _entry_args(notification_entry(instance)), "")


def on_notification_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    from messagecenter.items import notification_entry

    if not instance.withdrawn:
        mirror_after_commit("remove_item", _entry_args(notification_entry(instance)), "")


MIRRORS: dict[str, Callable[..., None]] = {
    "subscribers": mirror_subscribers,
    "user_groups": mirror_user_groups,
    "bulletin": mirror_bulletin,
    "bulletin_delete": delete_bulletin,
    "remove_item": remove_item,
    "message_detail": refresh_message_detail,
}


def connect() -> None:
    from messagecenter.models import Bulletin, Message, MessageImage, Notification, Subscription, UserGroup

    memberships_changed.connect(on_memberships_changed, dispatch_uid="mc_memberships_changed")
    pre_delete.connect(on_group_pre_delete, sender=UserGroup, dispatch_uid="mc_group_pre_delete")
    post_init.connect(on_bulletin_init, sender=Bulletin, dispatch_uid="mc_bulletin_init")
    post_save.connect(on_bulletin_saved, sender=Bulletin, dispatch_uid="mc_bulletin_saved")
    post_delete.connect(on_bulletin_deleted, sender=Bulletin, dispatch_uid="mc_bulletin_deleted")
    m2m_changed.connect(on_bulletin_groups_changed, sender=Bulletin.groups.through, dispatch_uid="mc_bulletin_groups")
    post_init.connect(on_message_init, sender=Message, dispatch_uid="mc_message_init")
    post_save.connect(on_message_saved, sender=Message, dispatch_uid="mc_message_saved")
    post_delete.connect(on_message_deleted, sender=Message, dispatch_uid="mc_message_deleted")
    post_save.connect(on_image_changed, sender=MessageImage, dispatch_uid="mc_image_saved")
    post_delete.connect(on_image_changed, sender=MessageImage, dispatch_uid="mc_image_deleted")
    post_init.connect(on_subscription_init, sender=Subscription, dispatch_uid="mc_subscription_init")
    post_save.connect(on_subscription_saved, sender=Subscription, dispatch_uid="mc_subscription_saved")
    post_delete.connect(on_subscription_deleted, sender=Subscription, dispatch_uid="mc_subscription_deleted")
    post_init.connect(on_notification_init, sender=Notification, dispatch_uid="mc_notification_init")
    post_save.connect(on_notification_saved, sender=Notification, dispatch_uid="mc_notification_saved")
    post_delete.connect(on_notification_deleted, sender=Notification, dispatch_uid="mc_notification_deleted")
