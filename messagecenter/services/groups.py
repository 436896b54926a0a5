"""User groups: how operators target people and how bulletins differ per group."""

from collections.abc import Iterable

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Count

from core.api.errors import ValidationFailed
from messagecenter import projection
from messagecenter.models import Bulletin, UserGroup, UserGroupMembership


def _existing_user_ids(user_ids: Iterable[int]) -> set[int]:
    wanted = {int(u) for u in user_ids}
    found = set(get_user_model().objects.filter(pk__in=wanted).values_list("pk", flat=True))
    missing = sorted(wanted - found)
    if missing:
        raise ValidationFailed(
            f"Unknown user id(s): {', '.join(map(str, missing))}.",
            code="unknown_users",
            fields={"user_ids": [f"Unknown user id(s): {', '.join(map(str, missing))}."]},
        )
    return wanted


def user_group_create(*, name: str) -> UserGroup:
    name = name.strip()
    if not name:
        raise ValidationFailed("A group needs a name.", fields={"name": ["This field may not be blank."]})
    try:
        with transaction.atomic():
            return UserGroup.objects.create(name=name)
    except IntegrityError as exc:
        raise ValidationFailed(
            f"A group named {name!r} exists already.", code="duplicate", fields={"name": ["This name is taken."]}
        ) from exc


def user_group_add_members(*, group: UserGroup, user_ids: Iterable[int]) -> int:
    """Add users (all or nothing: unknown ids raise naming them); returns how many joined."""
    wanted = _existing_user_ids(user_ids)
    with transaction.atomic():
        present = set(
            UserGroupMembership.objects.filter(group=group, user_id__in=wanted).values_list("user_id", flat=True)
        )
        new = sorted(wanted - present)
        UserGroupMembership.objects.bulk_create(
            [UserGroupMembership(group=group, user_id=u) for u in new], ignore_conflicts=True
        )
        # bulk_create sends no signals: ask for the projection here.
        projection.user_groups_changed(new)
    return len(new)


def user_group_remove_members(*, group: UserGroup, user_ids: Iterable[int]) -> int:
    """Remove users (unknown ids raise naming them, nothing changes); returns how many left."""
    wanted = _existing_user_ids(user_ids)
    with transaction.atomic():
        present = sorted(
            UserGroupMembership.objects.filter(group=group, user_id__in=wanted).values_list("user_id", flat=True)
        )
        # Each deleted row's receiver asks for its user; all coalesce into one run at commit.
        UserGroupMembership.objects.filter(group=group, user_id__in=present).delete()
    return len(present)


def user_group_delete(*, group: UserGroup) -> int:
    """Delete a group; returns how many bulletins went with it.

    A bulletin shown only to this group would otherwise be left with no
    groups, which means everyone: it is deleted instead. Members' Redis
    state follows after commit (the cascade's receivers).
    """
    with transaction.atomic():
        orphans = list(
            # annotate() before filter(): n counts all of a bulletin's groups, not the joined one.
            Bulletin.objects.annotate(n=Count("groups")).filter(n=1, groups=group).values_list("pk", flat=True)
        )
        for bulletin in Bulletin.objects.filter(pk__in=orphans):
            bulletin.delete()
        group.delete()
    return len(orphans)
