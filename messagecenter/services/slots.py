"""Allocation of (month, offset) slots for new inbox items: the bit each item takes in the per-user
push and read bitmaps."""

from datetime import datetime

from django.db import connections, router

from core.api.errors import LimitExceeded
from messagecenter.models import ItemSlotMonth

MAX_BIT_OFFSET = 2**32 - 1  # Redis refuses SETBIT beyond this


# One statement on every publish path instead of get_or_create + SELECT ...
# FOR UPDATE + UPDATE (and two savepoints). Race-free: ON CONFLICT DO UPDATE
# either inserts the month's row or locks the existing one and increments it
# (a concurrent first insert of the month waits on the primary key, then takes
# the update branch), so two senders never get the same offset. The WHERE
# refuses, changing nothing, once the month's offsets are used up: no row comes
# back. Table and columns are ItemSlotMonth's (a test holds them to the model).
_ALLOCATE_SQL = """
    INSERT INTO messagecenter_itemslotmonth (month, next_offset) VALUES (%s, 1)
    ON CONFLICT (month) DO UPDATE SET next_offset = messagecenter_itemslotmonth.next_offset + 1
    WHERE messagecenter_itemslotmonth.next_offset <= %s
    RETURNING next_offset - 1
"""


def slot_allocate(*, at: datetime) -> tuple[int, int]:
    """The next free (month, offset) for an item created at ``at``.

    The month's row stays locked until the caller's transaction ends, so
    concurrent senders never share a bit (a rolled-back send takes its
    increment with it); offsets restart at 0 each month (the month base),
    so bitmaps stay as small as the month's item count.
    """
    month = at.year * 100 + at.month
    with connections[router.db_for_write(ItemSlotMonth)].cursor() as cursor:
        cursor.execute(_ALLOCATE_SQL, [month, MAX_BIT_OFFSET])
        row = cursor.fetchone()
    if row is None:
        raise LimitExceeded(f"No bitmap slot left for month {month} (Redis bit offsets stop at 2^32 - 1).")
    return month, int(row[0])
