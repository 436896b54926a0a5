"""A group key's items in the user's inbox (``GET /api/v1/inbox/?group_key=``)."""

import json
import logging
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone
from redis.exceptions import RedisError

from core.api.errors import ValidationFailed
from core.api.pagination import decode_cursor, encode_cursor
from durability import healing
from messagecenter import fallback
from messagecenter.fill import inbox_served
from messagecenter.readmodel import grouping, inbox, to_ms
from messagecenter.readmodel.inbox import PageRow
from messagecenter.selectors import CURSOR_SCOPE, InboxPage, grouped_items
from messagecenter.services.grouping import GROUP_FIELD_MAX

logger = logging.getLogger(__name__)


def group_key_validate(group_key: str) -> None:
    if len(group_key) > GROUP_FIELD_MAX:
        raise ValidationFailed(
            f"group_key is longer than {GROUP_FIELD_MAX} characters.",
            code="invalid_group_key",
            fields={"group_key": [f"At most {GROUP_FIELD_MAX} characters."]},
        )


def _position(cursor: str, group_key: str) -> tuple[int, int]:
    payload: dict[str, Any] = decode_cursor(cursor, scope=CURSOR_SCOPE)
    try:
        score, skip = int(payload["p"]), int(payload["o"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValidationFailed(
            "The cursor is not valid.", code="invalid_cursor", fields={"cursor": ["Invalid cursor."]}
        ) from exc
    if payload.get("g") != group_key or skip < 0:
        raise ValidationFailed(
            "The cursor belongs to another listing.", code="invalid_cursor", fields={"cursor": ["Invalid cursor."]}
        )
    return score, skip


def inbox_group_list(
    *,
    user: AbstractBaseUser,
    group_key: str,
    limit: int = 20,
    cursor: str | None = None,
    now: datetime | None = None,
    language: str | None = None,
) -> InboxPage:
    """The items of ``group_key`` in the user's inbox, newest first, paged
    like the inbox (the cursor holds the last time returned and how many items
    at it were). Items of the key's open group are unread (the group is open
    while its row is); those of ended groups are read."""
    group_key_validate(group_key)
    max_score, skip = _position(cursor, group_key) if cursor else (None, 0)
    now = now or timezone.now()
    user_id = int(user.pk)
    degraded = False
    try:
        healing.require_ready()
        # The counts first: they fill the user's part of the read model when it is missing.
        counts = inbox_served(user_id, lambda: inbox.inbox_counts(user_id=user_id, now_ms=to_ms(now)))
        rows, position = _group_page(user_id, group_key, max_score, skip, limit)
    except RedisError as exc:
        logger.warning("redis unavailable (%s); group items of user %s from PostgreSQL", exc, user_id)
        rows, position = fallback.inbox_group_page(
            user_id=user_id, group_key=group_key, now=now, max_score=max_score, skip=skip, limit=limit
        )
        counts = fallback.inbox_counts(user_id=user_id, now=now)
        degraded = True
    next_cursor = None
    if position is not None:
        next_cursor = encode_cursor({"p": position[0], "o": position[1], "g": group_key}, scope=CURSOR_SCOPE)
    # The listing shows the group's items one by one: none carries the row's group.
    return InboxPage(
        results=grouped_items(user_id=user_id, rows=rows, with_groups=False, degraded=degraded, language=language),
        next_cursor=next_cursor,
        unread_count=counts.unread,
        unseen_count=counts.unseen,
        degraded=degraded,
    )


def _group_page(
    user_id: int, group_key: str, max_score: int | None, skip: int, limit: int
) -> tuple[list[PageRow], tuple[int, int] | None]:
    """A page of the key's items from Redis and the position of the next one
    (``fallback.inbox_group_page`` answers the same from PostgreSQL)."""
    found = grouping.group_items(user_id=user_id, group_key=group_key, max_score=max_score, skip=skip, limit=limit)
    rows = []
    for (member, score), raw in zip(found.members, found.details, strict=True):
        if raw is None:  # removed everywhere since
            continue
        unread = found.open_since is not None and score >= found.open_since
        rows.append(PageRow(ref=member.split("|", 1)[0], score=score, read=not unread, detail=json.loads(raw)))
    position = None
    if found.more and found.members:
        last = found.members[-1][1]
        at_last = sum(1 for _, score in found.members if score == last)
        position = (last, at_last + (skip if max_score == last else 0))
    return rows, position
