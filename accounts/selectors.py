"""Reads of the accounts app: a user's platforms (read through Redis) and counts per platform."""

from collections.abc import Iterable

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Count

from accounts import keys as account_keys
from accounts.models import Platform, UserPlatform
from accounts.platforms import ALL_PLATFORMS, default_platforms
from core.readthrough import platforms_policy, read_through


def platforms_of(*, stored: Iterable[str], is_staff: bool) -> list[str]:
    """A user's platforms from their stored rows, in the fixed order."""
    held = set(stored)
    if not held:
        # Users created in bulk (imports, benchmarks) have no rows: the default rule applies.
        return default_platforms(is_staff=is_staff)
    return [p for p in ALL_PLATFORMS if p in held]


def _platforms_from_db(*, user_id: int, is_staff: bool) -> list[str]:
    stored = UserPlatform.objects.filter(user_id=user_id).values_list("platform", flat=True)
    return platforms_of(stored=stored, is_staff=is_staff)


# Memo on the user object, like Django's permission cache: a request's user
# looks its platforms up once. Authentication restores it from the cached
# user snapshot, so an API request usually never asks Redis for it at all.
PLATFORMS_ATTR = "messagecenter_platforms"


def user_platforms(*, user: AbstractBaseUser | AnonymousUser) -> list[str]:
    """The user's platforms in a fixed order: memoised on the user object, else
    from the Redis cache, else from PostgreSQL.

    Announcement reads happen on every inbox request, so this stays off
    PostgreSQL; the caches are dropped whenever a membership changes.
    """
    if not user.is_authenticated:
        return []
    memo = getattr(user, PLATFORMS_ATTR, None)
    if memo is not None:
        return list(memo)
    platforms = _user_platforms(user)
    setattr(user, PLATFORMS_ATTR, tuple(platforms))
    return platforms


def _user_platforms(user: AbstractBaseUser) -> list[str]:
    user_id = int(user.pk)
    is_staff = bool(getattr(user, "is_staff", False))
    cached = read_through(
        account_keys.user_platforms(user_id),
        lambda: _platforms_from_db(user_id=user_id, is_staff=is_staff),
        policy=platforms_policy(),
    )
    return [str(p) for p in cached] if isinstance(cached, list) else default_platforms(is_staff=is_staff)


def platform_user_counts() -> dict[str, int]:
    """How many users each platform has (for read ratios), the default rule included."""
    counts = dict.fromkeys(ALL_PLATFORMS, 0)
    for row in UserPlatform.objects.values("platform").annotate(n=Count("user_id", distinct=True)):
        counts[row["platform"]] = row["n"]
    without_rows = (
        get_user_model().objects.filter(platform_memberships__isnull=True).values("is_staff").annotate(n=Count("pk"))
    )
    for staff_row in without_rows:
        platform = Platform.OPERATOR if staff_row["is_staff"] else Platform.USER
        counts[platform.value] += staff_row["n"]
    return counts
