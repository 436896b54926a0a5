"""Answers to a message's actions ("Approve", "Decline", ...).

A message may offer one to three actions; each recipient answers once. The
answer is a ``MessageResponse`` row (PostgreSQL is the truth, the unique
(message, user) constraint decides a race between two answers), committed
before the API answers; after commit ``projection.responses_changed`` records
it in the user's answer set in Redis, so an inbox page shows it without
SQL. Answering marks the item read.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.api.errors import Conflict, ValidationFailed
from messagecenter import projection
from messagecenter.fill import part_writing
from messagecenter.models import MessageResponse
from messagecenter.selectors import inbox_item_get
from messagecenter.services.inbox import inbox_mark_read
from webhooks import services as webhooks

ACTIONS_MAX = 3
ACTION_ID_MAX = 32
ACTION_LABEL_MAX = 40
_SLUG = re.compile(r"^[-a-zA-Z0-9_]+$")


def _invalid(message: str) -> ValidationFailed:
    return ValidationFailed(message, code="invalid_actions", fields={"actions": [message]})


def actions_validate(raw: Any) -> list[dict[str, str]]:
    """``[{"id": slug ≤ 32, "label": text ≤ 40}]``, one to three, distinct ids; else a 400 on ``actions``."""
    if not isinstance(raw, list) or not 1 <= len(raw) <= ACTIONS_MAX:
        raise _invalid(f"Give one to {ACTIONS_MAX} actions.")
    actions: list[dict[str, str]] = []
    for item in raw:
        if not isinstance(item, dict) or set(item) != {"id", "label"}:
            raise _invalid('Each action is {"id": slug, "label": text}.')
        action_id, label = item["id"], item["label"]
        if not isinstance(action_id, str) or not _SLUG.match(action_id) or len(action_id) > ACTION_ID_MAX:
            raise _invalid(f"An action id is a slug of at most {ACTION_ID_MAX} characters.")
        if not isinstance(label, str) or not label.strip() or len(label) > ACTION_LABEL_MAX:
            raise _invalid(f"An action label is 1 to {ACTION_LABEL_MAX} characters.")
        actions.append({"id": action_id, "label": label})
    if len({a["id"] for a in actions}) != len(actions):
        raise _invalid("Action ids must be distinct.")
    return actions


@dataclass(frozen=True)
class Answer:
    action: str
    at: datetime


def message_respond(*, user: AbstractBaseUser, item_id: str, action: str, now: datetime | None = None) -> Answer:
    """Answer one of the item's actions and mark it read.

    NotFound unless the item is live in the user's inbox; 400 for an item
    without actions or an action it does not offer; Conflict once the user
    answered it (the first answer stands)."""
    item = inbox_item_get(user=user, item_id=item_id)
    if not item.actions:
        raise ValidationFailed(
            "This item has no actions.", code="no_actions", fields={"action": ["This item has no actions."]}
        )
    offered = [a["id"] for a in item.actions]
    if action not in offered:
        raise ValidationFailed(
            f"Unknown action {action!r}.",
            code="unknown_action",
            fields={"action": [f"Choose from {', '.join(offered)}."]},
        )
    message_id = int(item.id[1:])
    at = now or timezone.now()
    # Whole milliseconds: the time Redis keeps (and pages show) is the row's.
    at = at.replace(microsecond=at.microsecond // 1000 * 1000)
    try:
        with part_writing(int(user.pk)), transaction.atomic():
            MessageResponse.objects.create(message_id=message_id, user_id=user.pk, action=action, at=at)
            webhooks.webhook_emit(
                event="message.responded",
                data={"message_id": str(message_id), "user_id": str(user.pk), "action": action},
                at=at,
            )
            projection.responses_changed(int(user.pk), [message_id])
    except IntegrityError as exc:
        raise Conflict("You already answered this item.", code="already_responded") from exc
    inbox_mark_read(user=user, item_id=item_id, now=now)
    return Answer(action=action, at=at)


def responses_of(*, user_id: int, message_ids: Sequence[int]) -> dict[int, tuple[str, datetime]]:
    """The user's answers from PostgreSQL (the rebuild, the fallback): ``{message id: (action, at)}``."""
    rows = MessageResponse.objects.filter(user_id=user_id, message_id__in=list(message_ids))
    return {m: (a, at) for m, a, at in rows.values_list("message_id", "action", "at")}
