"""Receivers that mirror committed changes into the core read model.

They only invalidate cache entries, after commit (core/readthrough.py writes
tombstones): the next read fills them from PostgreSQL. A Redis failure here
leaves an entry that its TTL ends.
"""

import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from redis.exceptions import RedisError

from accounts import keys as account_keys
from accounts.models import ApiToken, UserPlatform
from accounts.services import user_ensure_default_platform
from accounts.tokens import tokens_end_stale
from core.readthrough import invalidate

# A save that names only these fields can neither change a password nor deactivate:
# every sign-in saves last_login this way, and skips the token check.
_TOKEN_NEUTRAL_FIELDS = frozenset({"last_login"})

logger = logging.getLogger(__name__)


def _after_commit(action: Callable[[], None]) -> None:
    def run() -> None:
        try:
            action()
        except RedisError:
            logger.warning("redis unavailable; cache entry left to expire", exc_info=True)

    transaction.on_commit(run)


@receiver(post_save, sender=settings.AUTH_USER_MODEL, dispatch_uid="core_user_saved")
def user_saved(sender: Any, instance: Any, created: bool, raw: bool = False, **kwargs: Any) -> None:
    if raw:
        return
    if created:
        user_ensure_default_platform(user=instance)
    else:
        update_fields = kwargs.get("update_fields")
        if update_fields is None or not set(update_fields) <= _TOKEN_NEUTRAL_FIELDS:
            # A password change or a deactivation ends the user's tokens (each
            # deleted row drops its own cache entry after commit).
            tokens_end_stale(user=instance)
    user_id = instance.pk
    _after_commit(lambda: _user_drop(user_id))


@receiver(post_delete, sender=settings.AUTH_USER_MODEL, dispatch_uid="core_user_deleted")
def user_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    user_id = instance.pk
    _after_commit(lambda: _user_drop(user_id))


def _user_drop(user_id: int) -> None:
    """Drop the user's cached copies, those kept under their API tokens included."""
    digests = list(ApiToken.objects.filter(user_id=user_id).values_list("digest", flat=True))
    # The platforms ride on both snapshots: every copy goes at once.
    invalidate(
        account_keys.auth_user(user_id), account_keys.user_platforms(user_id), *map(account_keys.auth_token, digests)
    )


@receiver(post_delete, sender=ApiToken, dispatch_uid="core_token_deleted")
@receiver(post_save, sender=ApiToken, dispatch_uid="core_token_saved")
def token_changed(sender: Any, instance: ApiToken, **kwargs: Any) -> None:
    digest = instance.digest
    # A new token replaces the miss a client guessing it may have left; a
    # deleted one answers 401 from the commit on.
    _after_commit(lambda: invalidate(account_keys.auth_token(digest)))


@receiver(post_save, sender=UserPlatform, dispatch_uid="core_userplatform_saved")
@receiver(post_delete, sender=UserPlatform, dispatch_uid="core_userplatform_deleted")
def platform_changed(sender: Any, instance: UserPlatform, **kwargs: Any) -> None:
    if kwargs.get("raw"):
        return
    user_id = instance.user_id
    _after_commit(lambda: _user_drop(user_id))
