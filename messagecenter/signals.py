"""Receivers: model changes made anywhere (services, admin, shell) reach Redis.

Connected in ``MessagecenterConfig.ready()``. Each one is an adapter that asks
``messagecenter.projection`` for a run after commit; the projection coalesces
the requests of one transaction (a service's own request included) into one
run per key. Saves that change nothing the read model shows are skipped: the
values as loaded are kept by ``durability.projection.LoadedValues`` (by instance
identity, not on the instance). A new message or notification is delivered by
its task, enqueued by its service, not from here.
"""

from typing import Any

from django.db.models.signals import m2m_changed, post_delete, post_init, post_save, pre_delete, pre_save

from durability.projection import LoadedValues
from messagecenter import projection
from messagecenter.models import (
    Bulletin,
    Message,
    MessageImage,
    MessageStatus,
    MessageType,
    MutePeriod,
    Notification,
    Subscription,
    UserGroup,
    UserGroupMembership,
)

BULLETIN_FIELDS = ("title", "body_html", "display_time", "expire_at", "translations")
MESSAGE_FIELDS = ("category", "title", "summary", "body_html", "link", "images", "expire_at", "status")

_bulletins = LoadedValues(BULLETIN_FIELDS)
_messages = LoadedValues(MESSAGE_FIELDS)
_subscriptions = LoadedValues(("message_type_id", "scope"))
_notifications = LoadedValues(("withdrawn",))
_memberships = LoadedValues(("user_id",))  # as stored before an update (not on load)


def _remember(loaded: LoadedValues) -> Any:
    def on_init(sender: Any, instance: Any, **kwargs: Any) -> None:
        if instance.pk is not None:  # loaded from a row (a new instance has nothing to compare with)
            loaded.remember(instance)

    return on_init


# --- memberships ---------------------------------------------------------------------


def on_membership_saving(sender: Any, instance: UserGroupMembership, raw: bool = False, **kwargs: Any) -> None:
    # An update may move the row to another user, who leaves the group: read
    # the stored user (one query, on updates only, which the app never makes)
    # rather than remember it for every membership loaded.
    if not raw and not instance._state.adding:
        stored = UserGroupMembership.objects.filter(pk=instance.pk).values_list("user_id", flat=True).first()
        _memberships.remember(instance, (stored,))


def on_membership_saved(sender: Any, instance: UserGroupMembership, raw: bool = False, **kwargs: Any) -> None:
    before = _memberships.get(instance)
    left = {before[0]} if before is not None and before[0] is not None else set()
    projection.user_groups_changed({instance.user_id} | left)


def on_membership_deleted(sender: Any, instance: UserGroupMembership, **kwargs: Any) -> None:
    # Also each row of a cascade (a user or a group deleted): one run for all after commit.
    projection.user_groups_changed([instance.user_id])


def on_members_changed(
    sender: Any, instance: Any, action: str, reverse: bool, pk_set: set[int] | None = None, **kwargs: Any
) -> None:
    """``group.members.add/remove/clear/set`` and ``user.message_groups.…`` (which
    write the through rows with bulk queries, no row signals)."""
    if action in {"post_add", "post_remove"} and pk_set:
        projection.user_groups_changed(sorted(pk_set) if not reverse else [instance.pk])
    elif action == "pre_clear":
        if reverse:
            projection.user_groups_changed([instance.pk])
        else:
            projection.user_groups_changed(instance.memberships.values_list("user_id", flat=True))


def on_group_pre_delete(sender: Any, instance: UserGroup, **kwargs: Any) -> None:
    projection.group_deleting(instance)


# --- bulletins -----------------------------------------------------------------------


def on_bulletin_saved(sender: Any, instance: Bulletin, created: bool, raw: bool = False, **kwargs: Any) -> None:
    before = _bulletins.get(instance)
    _bulletins.remember(instance)
    if raw or (not created and before == _bulletins.of(instance)):
        return
    projection.bulletin_changed([instance.pk])


def on_bulletin_groups_changed(
    sender: Any, instance: Any, action: str, reverse: bool, pk_set: set[int] | None = None, **kwargs: Any
) -> None:
    # From the bulletin's side (bulletin.groups...) or the group's (group.bulletins...).
    if action == "pre_clear" and reverse:
        projection.bulletin_changed(instance.bulletins.values_list("pk", flat=True))
    elif action in {"post_add", "post_remove"} and reverse:
        projection.bulletin_changed(pk_set or ())
    elif action in {"post_add", "post_remove", "post_clear"} and not reverse:
        projection.bulletin_changed([instance.pk])


def on_bulletin_deleted(sender: Any, instance: Bulletin, **kwargs: Any) -> None:
    projection.bulletin_deleted(instance)


# --- messages ------------------------------------------------------------------------


def on_message_saved(sender: Any, instance: Message, created: bool, raw: bool = False, **kwargs: Any) -> None:
    before = _messages.get(instance)
    _messages.remember(instance)
    if raw or created or before == _messages.of(instance):
        return
    if instance.status != MessageStatus.RETRACTED:
        projection.message_changed(instance.pk)
    elif before is None or before[-1] != MessageStatus.RETRACTED:
        projection.message_removed(instance)


def on_message_deleted(sender: Any, instance: Message, **kwargs: Any) -> None:
    projection.message_removed(instance)


def on_image_changed(sender: Any, instance: MessageImage, raw: bool = False, **kwargs: Any) -> None:
    if not raw:
        projection.message_changed(instance.message_id)


# --- subscriptions and notifications ---------------------------------------------------


def _subscription_pairs(instance: Subscription) -> set[tuple[int, str]]:
    pairs = {(instance.message_type_id, instance.scope)}
    before = _subscriptions.get(instance)
    if before is not None and before[0] is not None:
        pairs.add(before)  # an edit moving it to another (type, scope) leaves the old set
    return pairs


def on_subscription_saved(sender: Any, instance: Subscription, raw: bool = False, **kwargs: Any) -> None:
    if not raw:
        projection.subscribers_changed(_subscription_pairs(instance))
    _subscriptions.remember(instance)


def on_subscription_deleted(sender: Any, instance: Subscription, **kwargs: Any) -> None:
    projection.subscribers_changed(_subscription_pairs(instance))


def on_notification_saved(sender: Any, instance: Notification, created: bool, raw: bool = False, **kwargs: Any) -> None:
    before = _notifications.get(instance)
    _notifications.remember(instance)
    if not (raw or created) and before == (False,) and instance.withdrawn:
        projection.notification_removed(instance)


def on_notification_deleted(sender: Any, instance: Notification, **kwargs: Any) -> None:
    if not instance.withdrawn:  # a withdrawn one left already
        projection.notification_removed(instance)


def on_mute_period_deleted(sender: Any, instance: MutePeriod, **kwargs: Any) -> None:
    # Cascades of a deleted user or message type: the mirror follows.
    projection.user_mutes_changed([instance.user_id])


def on_message_type_pre_delete(sender: Any, instance: MessageType, **kwargs: Any) -> None:
    projection.message_type_deleting(instance.pk)


def connect() -> None:
    pre_save.connect(on_membership_saving, sender=UserGroupMembership, dispatch_uid="mc_membership_saving")
    post_save.connect(on_membership_saved, sender=UserGroupMembership, dispatch_uid="mc_membership_saved")
    post_delete.connect(on_membership_deleted, sender=UserGroupMembership, dispatch_uid="mc_membership_deleted")
    # The through model is the sender from both sides (group.members, user.message_groups).
    m2m_changed.connect(on_members_changed, sender=UserGroup.members.through, dispatch_uid="mc_members_changed")
    pre_delete.connect(on_group_pre_delete, sender=UserGroup, dispatch_uid="mc_group_pre_delete")
    post_init.connect(_remember(_bulletins), sender=Bulletin, weak=False, dispatch_uid="mc_bulletin_init")
    post_save.connect(on_bulletin_saved, sender=Bulletin, dispatch_uid="mc_bulletin_saved")
    post_delete.connect(on_bulletin_deleted, sender=Bulletin, dispatch_uid="mc_bulletin_deleted")
    m2m_changed.connect(on_bulletin_groups_changed, sender=Bulletin.groups.through, dispatch_uid="mc_bulletin_groups")
    post_init.connect(_remember(_messages), sender=Message, weak=False, dispatch_uid="mc_message_init")
    post_save.connect(on_message_saved, sender=Message, dispatch_uid="mc_message_saved")
    post_delete.connect(on_message_deleted, sender=Message, dispatch_uid="mc_message_deleted")
    post_save.connect(on_image_changed, sender=MessageImage, dispatch_uid="mc_image_saved")
    post_delete.connect(on_image_changed, sender=MessageImage, dispatch_uid="mc_image_deleted")
    post_init.connect(_remember(_subscriptions), sender=Subscription, weak=False, dispatch_uid="mc_subscription_init")
    post_save.connect(on_subscription_saved, sender=Subscription, dispatch_uid="mc_subscription_saved")
    post_delete.connect(on_subscription_deleted, sender=Subscription, dispatch_uid="mc_subscription_deleted")
    post_init.connect(_remember(_notifications), sender=Notification, weak=False, dispatch_uid="mc_notification_init")
    post_save.connect(on_notification_saved, sender=Notification, dispatch_uid="mc_notification_saved")
    post_delete.connect(on_notification_deleted, sender=Notification, dispatch_uid="mc_notification_deleted")
    post_delete.connect(on_mute_period_deleted, sender=MutePeriod, dispatch_uid="mc_mute_period_deleted")
    pre_delete.connect(on_message_type_pre_delete, sender=MessageType, dispatch_uid="mc_message_type_pre_delete")
