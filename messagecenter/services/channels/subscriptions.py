"""The user's push devices: a browser's subscription saved, found again, removed."""

from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.api.errors import NotFound
from messagecenter.models import PushSubscription
from messagecenter.webpush import endpoint_check, keys_check


def push_subscription_save(
    *, user: AbstractBaseUser, endpoint: Any, keys: Any, user_agent: str = ""
) -> tuple[PushSubscription, bool]:
    """Save a browser's subscription for the user: (row, created). The same
    endpoint again is the same row (its keys refreshed); an endpoint another
    user had moves to this one, as a new row (the browser now belongs to
    whoever signed in). Past ``MESSAGECENTER_PUSH_MAX_PER_USER`` devices the
    oldest goes. Bad input is a 400 and changes nothing."""
    endpoint = endpoint_check(endpoint)
    p256dh, auth = keys_check(keys)
    user_id = int(user.pk)
    with transaction.atomic():
        existing = PushSubscription.objects.select_for_update().filter(endpoint=endpoint).first()
        if existing is not None and int(existing.user_id) == user_id:
            if (existing.p256dh, existing.auth) != (p256dh, auth):
                existing.p256dh, existing.auth = p256dh, auth
                existing.save(update_fields=["p256dh", "auth"])
            return existing, False
        if existing is not None:
            existing.delete()
        try:
            with transaction.atomic():
                row = PushSubscription.objects.create(
                    user_id=user_id,
                    endpoint=endpoint,
                    p256dh=p256dh,
                    auth=auth,
                    user_agent=user_agent[:300],
                    created_at=timezone.now(),
                )
        except IntegrityError:
            # The same browser subscribing twice at once: the other request's row stands.
            row = PushSubscription.objects.get(endpoint=endpoint)
            return row, False
        keep = int(settings.MESSAGECENTER_PUSH_MAX_PER_USER)
        # mc_pushsub_user_idx serves this (user, newest first).
        stale = list(
            PushSubscription.objects.filter(user_id=user_id)
            .order_by("-created_at", "-pk")
            .values_list("pk", flat=True)[keep:]
        )
        if stale:
            PushSubscription.objects.filter(pk__in=stale).delete()
    return row, True


def push_subscription_delete(*, user: AbstractBaseUser, subscription_id: int) -> None:
    """Remove one of the user's devices; anyone else's id is a 404."""
    deleted, _ = PushSubscription.objects.filter(pk=subscription_id, user_id=int(user.pk)).delete()
    if not deleted:
        raise NotFound("No such push subscription of yours.")
