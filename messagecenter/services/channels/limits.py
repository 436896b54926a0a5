"""Quiet hours and the hourly cap, as the senders apply them to a batch.

Order for each recipient: inside their quiet hours the item is held (their
``ChannelHold`` row says until when; the release sends one summary push and
one e-mail of what is still unread then); otherwise the hourly cap
(``MESSAGECENTER_CHANNEL_MAX_PER_HOUR`` pushes and e-mails a user) decides,
and what it refuses waits for the digest.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings

from messagecenter.models import ChannelHold
from messagecenter.readmodel.channels import channel_sends_take
from messagecenter.services.channels.recipients import Recipient


@dataclass
class Limited:
    send: list[Recipient] = field(default_factory=list)
    held: list[tuple[Recipient, datetime]] = field(default_factory=list)  # (recipient, quiet hours end)
    deferred: list[Recipient] = field(default_factory=list)  # over the cap: the digest's


def hour_of(at: datetime) -> int:
    """Hours since the epoch (UTC): the cap's window."""
    return int(at.timestamp() // 3600)


def limits_apply(recipients: Sequence[Recipient], *, now: datetime) -> Limited:
    """Sort recipients into sent now, held for quiet hours and over the cap.
    Takes the cap's count for those sent now (raises RedisError)."""
    result = Limited()
    candidates: list[Recipient] = []
    for recipient in recipients:
        ends = recipient.quiet.ends_after(now) if recipient.quiet is not None else None
        if ends is not None:
            result.held.append((recipient, ends))
        else:
            candidates.append(recipient)
    if candidates:
        allowed = channel_sends_take(
            user_ids=[r.user_id for r in candidates],
            hour=hour_of(now),
            cap=int(settings.MESSAGECENTER_CHANNEL_MAX_PER_HOUR),
        )
        for recipient in candidates:
            (result.send if recipient.user_id in allowed else result.deferred).append(recipient)
    return result


def holds_record(held: Sequence[tuple[Recipient, datetime]], *, since: datetime) -> None:
    """One row per held user (one statement for the batch): a user already
    holding keeps the earlier ``since``; ``until`` is their quiet hours' end."""
    if not held:
        return
    ChannelHold.objects.bulk_create(
        [ChannelHold(user_id=recipient.user_id, since=since, until=until) for recipient, until in held],
        update_conflicts=True,
        unique_fields=["user"],
        update_fields=["until"],
    )
