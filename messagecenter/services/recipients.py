"""The recipients a fan-out reached, in PostgreSQL: the index a user's fill
reads their pushed items by (``MessageRecipient``, ``NotificationRecipient``).

Each fan-out chunk writes its users' rows before its Redis write, so every
entry Redis got has its row; a rerun adds nothing (``ON CONFLICT DO
NOTHING``). Without them a fill would test the user against the audience
bitmap of every live pushed item, a cost that grows with everyone's items
rather than with the user's own.
"""

from collections.abc import Sequence

from messagecenter.models import Message, MessageRecipient, Notification, NotificationRecipient

# Rows per INSERT: a fan-out chunk is MESSAGECENTER_FANOUT_CHUNK users (1,000 by
# default); the eager path writes a whole audience at once.
BATCH = 1000


def recipients_add(*, item: Message | Notification, user_ids: Sequence[int]) -> None:
    """Record that the fan-out of ``item`` reached these users."""
    if isinstance(item, Message):
        MessageRecipient.objects.bulk_create(
            [MessageRecipient(user_id=u, message_id=item.pk) for u in user_ids], batch_size=BATCH, ignore_conflicts=True
        )
    else:
        NotificationRecipient.objects.bulk_create(
            [NotificationRecipient(user_id=u, notification_id=item.pk) for u in user_ids],
            batch_size=BATCH,
            ignore_conflicts=True,
        )
