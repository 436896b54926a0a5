"""Allocation of seed 004 bitmap slots (month, offset) for new inbox items."""

from datetime import datetime

from django.db import transaction

from core.exceptions import LimitExceeded
from messagecenter.models import ItemSlotMonth

MAX_BIT_OFFSET = 2**32 - 1  # Redis refuses SETBIT beyond this


def slot_allocate(*, at: datetime) -> tuple[int, int]:
    """The next free (month, offset) for an item created at ``at``.

    The month row is locked while the offset moves on, so concurrent
    senders never share a bit; offsets restart at 0 each month (the month
    base), so bitmaps stay as small as the month's item count.
    """
    month = at.year * 100 + at.month
    with transaction.atomic():
        ItemSlotMonth.objects.get_or_create(month=month)
        row = ItemSlotMonth.objects.select_for_update().get(month=month)
        offset = row.next_offset
        if offset > MAX_BIT_OFFSET:
            raise LimitExceeded(f"No bitmap slot left for month {month} (Redis bit offsets stop at 2^32 - 1).")
        row.next_offset = offset + 1
        row.save(update_fields=["next_offset"])
    return month, offset
