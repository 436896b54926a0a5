"""Read use cases of the core app."""

from collections.abc import Iterable
from datetime import datetime

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Count

from core import keys
from core.cursors import KeysetPage, keyset_page
from core.models import AuditEntry, Platform, UserPlatform
from core.params import page_scope
from core.platforms import ALL_PLATFORMS, default_platforms
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
        keys.user_platforms(user_id),
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


def audit_list(
    *,
    limit: int,
    cursor: str | None,
    actor: str | None = None,
    action: str | None = None,
    object_type: str | None = None,
    object_id: str | None = None,
    since: datetime | None = None,
) -> KeysetPage[AuditEntry]:
    """The audit log newest first, filtered (``actor`` is a username as recorded)."""
    filters = {"actor": actor, "action": action, "object_type": object_type, "object_id": object_id, "since": since}
    entries = AuditEntry.objects.all()
    if actor is not None:
        entries = entries.filter(actor_name=actor)
    if action is not None:
        entries = entries.filter(action=action)
    if object_type is not None:
        entries = entries.filter(object_type=object_type)
    if object_id is not None:
        entries = entries.filter(object_id=object_id)
    if since is not None:
        entries = entries.filter(at__gt=since)
    return keyset_page(entries, limit=limit, cursor=cursor, scope=page_scope("audit", filters), time_field="at")
