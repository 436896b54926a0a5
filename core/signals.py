"""Receivers that mirror committed platform changes into Redis."""

from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from redis.exceptions import RedisError

from core import keys
from core.models import UserPlatform
from core.redis import get_redis


def _drop_platform_cache(user_id: int) -> None:
    try:
        get_redis().delete(keys.user_platforms(user_id))
    except RedisError:
        # The cache has a TTL; a stale entry ends with it. Issue-level
        # reliability (outbox replay) covers this path too.
        pass


@receiver(post_save, sender=settings.AUTH_USER_MODEL, dispatch_uid="core_user_default_platform")
def user_saved(sender: Any, instance: Any, created: bool, raw: bool = False, **kwargs: Any) -> None:
    if raw:
        return
    if created:
        from core.services import user_ensure_default_platform

        user_ensure_default_platform(user=instance)
    transaction.on_commit(lambda: _drop_platform_cache(instance.pk))


@receiver(post_save, sender=UserPlatform, dispatch_uid="core_userplatform_saved")
@receiver(post_delete, sender=UserPlatform, dispatch_uid="core_userplatform_deleted")
def platform_changed(sender: Any, instance: UserPlatform, **kwargs: Any) -> None:
    if kwargs.get("raw"):
        return
    user_id = instance.user_id
    transaction.on_commit(lambda: _drop_platform_cache(user_id))
