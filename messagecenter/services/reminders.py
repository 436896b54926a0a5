"""Reminders: a follow-up to the users who have not read a message or bulletin yet.

The reminder is an ordinary message (``message_send``): stored, audited by the
caller, delivered through its pending delivery, idempotent under the caller's
key. Its audience is the item's non-readers at the time of the call, named as
users, so a later read of the original does not take anyone out of it.
"""

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from core.api.errors import Conflict
from messagecenter import insight
from messagecenter.models import Bulletin, Category, Message
from messagecenter.services.messages import message_send

REMINDER_PREFIX = "Reminder: "
_TITLE_MAX = 200


def reminder_title(item: Message | Bulletin) -> str:
    return (REMINDER_PREFIX + item.title)[:_TITLE_MAX]


def item_remind(*, item: Message | Bulletin, actor: AbstractBaseUser | None, title: str | None = None) -> Message:
    """Send a reminder of ``item`` to its audience members whose ever-read bit is 0.

    Raises Conflict (``all_read``) when everyone has read it (nothing is
    stored) and (``not_sent``) for a message that was never sent.
    """
    user_ids = [pk for pk, _ in insight.item_unread_all(item=item)]
    if not user_ids:
        raise Conflict("Everyone in the audience has read it: no reminder was sent.", code="all_read")
    now = timezone.now()
    expire_at = item.expire_at if item.expire_at is not None and item.expire_at > now else None
    if isinstance(item, Message):
        return message_send(
            sender=actor,
            category=item.category,
            title=title or reminder_title(item),
            summary=item.summary,
            body_html=item.body_html,
            link=item.link,
            images=list(item.images or []),
            user_ids=user_ids,
            expire_at=expire_at,
        )
    return message_send(
        sender=actor,
        category=Category.SYSTEM,
        title=title or reminder_title(item),
        body_html=item.body_html,
        user_ids=user_ids,
        expire_at=expire_at,
    )
