"""Idempotent message sends: a retried ``POST /api/v1/manage/messages/`` with the
same idempotency key stores nothing new and answers with the first message."""

import hashlib
import json
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.api.errors import Conflict
from messagecenter.models import Message, MessageSendKey

IDEMPOTENCY_WINDOW = timedelta(hours=24)


def request_fingerprint(data: Mapping[str, Any]) -> str:
    """A stable hash of a validated request body (keys sorted, ids as numbers, times as ISO)."""
    canonical = json.dumps(data, cls=DjangoJSONEncoder, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def message_send_once(
    *, key: str, fingerprint: str, send: Callable[[], Message], now: datetime | None = None
) -> tuple[Message, bool]:
    """Run ``send`` once per key within the window; returns (message, created).

    The key row is inserted before the message, in the same transaction, and
    its unique index decides between concurrent requests: the loser's INSERT
    blocks until the winner commits, then fails, and the loser reads the
    winner's message (READ COMMITTED sees it). If the winner rolls back, the
    loser's INSERT succeeds and it sends. A key older than the window is
    deleted first, so it can be used again.
    Raises Conflict when the key was used with another body.
    """
    now = now or timezone.now()
    with transaction.atomic():
        MessageSendKey.objects.filter(key=key, created_at__lt=now - IDEMPOTENCY_WINDOW).delete()
        try:
            with transaction.atomic():
                row = MessageSendKey.objects.create(key=key, fingerprint=fingerprint, created_at=now)
        except IntegrityError:
            existing = MessageSendKey.objects.select_related("message").get(key=key)
            if existing.fingerprint != fingerprint or existing.message is None:
                raise Conflict(
                    "This idempotency key was already used with a different request.",
                    code="idempotency_conflict",
                    fields={"idempotency_key": ["Already used with a different request."]},
                ) from None
            return existing.message, False
        message = send()
        row.message = message
        row.save(update_fields=["message"])
    return message, True


def message_send_keys_purge(*, now: datetime | None = None) -> int:
    """Delete keys older than the window (a periodic clean-up; old keys are ignored anyway)."""
    now = now or timezone.now()
    deleted, _ = MessageSendKey.objects.filter(created_at__lt=now - IDEMPOTENCY_WINDOW).delete()
    return int(deleted)
