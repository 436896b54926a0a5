"""Reads of the channels beyond the inbox: a user's push devices, and what an
item's channels did (the operators' read-back)."""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from messagecenter.models import ItemChannels, PushSubscription


def push_subscriptions_of(*, user_id: int) -> list[PushSubscription]:
    """The user's devices, newest first (mc_pushsub_user_idx)."""
    return list(PushSubscription.objects.filter(user_id=user_id).order_by("-created_at", "-pk"))


@dataclass(frozen=True)
class ChannelCounts:
    web_push: bool = False
    email_after_seconds: int | None = None
    push_sent: int = 0
    push_failed: int = 0
    email_sent: int = 0
    email_skipped_read: int = 0
    email_deferred: int = 0

    def as_dict(self) -> dict[str, Any]:
        """What the channels did, in the read-back's shape."""
        return {
            "web_push": {"sent": self.push_sent, "failed": self.push_failed},
            "email": {
                "sent": self.email_sent,
                "skipped_read": self.email_skipped_read,
                "deferred": self.email_deferred,
            },
        }

    def requested(self) -> dict[str, Any]:
        """What the create asked, in its own shape."""
        return {"web_push": self.web_push, "email_if_unread_after_seconds": self.email_after_seconds}


def channel_counts(*, item_ids: Iterable[str]) -> dict[str, ChannelCounts]:
    """What each item asked of the channels and what they did; items that asked
    nothing are absent (all zero). One query (the unique index on item_id)."""
    rows = ItemChannels.objects.filter(item_id__in=list(item_ids)).values_list(
        "item_id",
        "web_push",
        "email_after_seconds",
        "push_sent",
        "push_failed",
        "email_sent",
        "email_skipped_read",
        "email_deferred",
    )
    return {str(row[0]): ChannelCounts(*row[1:]) for row in rows}
