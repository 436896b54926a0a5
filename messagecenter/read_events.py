"""The fold of pending first reads into the per-item hour counters, and the
``message.read`` webhook events it gives rise to.

Every fold goes through here (the beat job, and the admin's and read-back's
folds before they read the counters), so no first read reaches the counters
without its event. An event is coalesced: one per message per fold (the beat
job folds every minute), carrying counts and never a user id: the first reads
since the previous event, the reads so far, the audience and the read rate.
"""

from collections import Counter
from collections.abc import Mapping
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction

from messagecenter.models import Message
from messagecenter.readmodel import reads
from messagecenter.selectors import item_refs_at_slots
from webhooks import services as webhooks

EVENT = "message.read"


def first_reads_fold() -> int:
    """Fold every pending first read (raises RedisError); returns entries folded."""
    folded: Counter[str] = Counter()
    entries = reads.first_reads_fold(resolve=item_refs_at_slots, on_batch=folded.update)
    message_read_emit(first_reads=folded)
    return entries


def message_read_emit(*, first_reads: Mapping[str, int]) -> int:
    """One ``message.read`` event per message among ``first_reads`` (ref -> first
    reads just folded); returns the events recorded. Nothing, not even a query
    of the messages, when no endpoint wants the event."""
    wanted = {int(ref[1:]): count for ref, count in first_reads.items() if ref.startswith("m") and count > 0}
    if not wanted or not webhooks.webhook_wanted(EVENT):
        return 0
    messages = list(Message.objects.filter(pk__in=list(wanted)).only("pk", "everyone", "audience_size"))
    totals = reads.read_totals(refs=[message.ref for message in messages])
    everyone = None
    emitted = 0
    with transaction.atomic():
        for message in sorted(messages, key=lambda m: int(m.pk)):
            if message.everyone or message.audience_size is None:
                if everyone is None:
                    everyone = get_user_model().objects.filter(is_active=True).count()
                audience = everyone
            else:
                audience = int(message.audience_size)
            read = totals.get(message.ref, 0)
            data: dict[str, Any] = {
                "id": str(message.pk),
                "first_reads": wanted[int(message.pk)],
                "reads": read,
                "audience": audience,
                "read_rate": round(min(read / audience, 1.0), 4) if audience > 0 else None,
            }
            webhooks.webhook_emit(event=EVENT, data=data)
            emitted += 1
    return emitted
