"""Writes of the accounts app: a user's platforms."""

from collections.abc import Iterable

from django.contrib.auth.models import User
from django.db import transaction

from accounts.models import UserPlatform
from accounts.platforms import clean_platforms, default_platforms
from accounts.selectors import PLATFORMS_ATTR


def user_set_platforms(*, user: User, platforms: Iterable[str]) -> list[str]:
    """Replace the user's platforms; returns them in canonical order.

    A user is always on at least one platform. The Redis cache of the user's
    platforms is dropped after commit by the signal receivers.
    """
    wanted = clean_platforms(platforms, empty_message="A user must be on at least one platform.")
    with transaction.atomic():
        current = set(UserPlatform.objects.filter(user=user).values_list("platform", flat=True))
        removed = current - set(wanted)
        if removed:
            for membership in UserPlatform.objects.filter(user=user, platform__in=removed):
                membership.delete()  # one by one, so post_delete receivers see each
        for platform in wanted:
            if platform not in current:
                UserPlatform.objects.create(user=user, platform=platform)
    setattr(user, PLATFORMS_ATTR, tuple(wanted))  # the caller's object sees its own change
    return wanted


def user_ensure_default_platform(*, user: User) -> None:
    """Give a new user the default platform (operator for staff, user otherwise)."""
    if not UserPlatform.objects.filter(user=user).exists():
        for platform in default_platforms(is_staff=bool(getattr(user, "is_staff", False))):
            UserPlatform.objects.get_or_create(user=user, platform=platform)
