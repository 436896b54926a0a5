"""Read use cases of the message centre.

The inbox selectors run no SQL while Redis answers: everything they need
(items, read state, counts, the user's groups) is in Redis, kept in step
after commit. When Redis fails, or answers without its read model (lost
data being rebuilt, ``durability.healing``), they answer from PostgreSQL instead
(``messagecenter.fallback``: same items, order, cursors and counts; read
state as committed: every acknowledged mark), slower, and say so.
"""

import dataclasses
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Q
from django.utils import timezone
from redis.exceptions import RedisError

from core.api.errors import NotFound, ValidationFailed
from core.api.fields import TimeField
from core.api.lookups import Whole
from core.api.pagination import decode_cursor, encode_cursor
from core.api.translations import localized
from durability import healing
from messagecenter import fallback
from messagecenter.channel_prefs import channels_view
from messagecenter.fill import inbox_served
from messagecenter.items import KIND_BY_PREFIX
from messagecenter.models import (
    CATEGORIES,
    Bulletin,
    FanoutChunk,
    Message,
    MessageResponse,
    MessageType,
    MutePeriod,
    Notification,
    Subscription,
    UserGroup,
    UserGroupMembership,
    UserPreferences,
)
from messagecenter.quiet import quiet_hours_of
from messagecenter.readmodel import grouping as readmodel_grouping
from messagecenter.readmodel import inbox, listing, ms_to_datetime, to_ms
from messagecenter.readmodel import responses as responses_rm
from messagecenter.readmodel.inbox import CachedPage, Counts, Page, PageRow
from notices.selectors import (
    COUNT_SCRIPT,
    announcement_count_call,
    announcement_count_settle,
    announcement_counts,
)

logger = logging.getLogger(__name__)

CURSOR_SCOPE = "inbox"


@dataclass(frozen=True)
class InboxItem:
    id: str
    kind: str
    category: str
    title: str
    summary: str
    created_at: datetime
    read: bool
    body_html: str
    images: list[str]
    link: str | None
    # The operator's name (messages, bulletins); None for what the system sent.
    sender: str | None = None
    # [{"id", "label"}] the reader may answer (messages only), and their answer.
    actions: list[dict[str, str]] = dataclasses.field(default_factory=list)
    response: dict[str, Any] | None = None
    # A grouped row's group ({key, count, actors}); None for items without a key.
    group: dict[str, Any] | None = None


@dataclass(frozen=True)
class InboxPage:
    results: list[InboxItem]
    next_cursor: str | None
    unread_count: int
    unseen_count: int
    # True when Redis was down and PostgreSQL answered: no live updates meanwhile.
    degraded: bool = False
    # Set when the page may be kept in the page cache (readmodel.inbox.page_cache_put).
    cache_tag: tuple[str, str] | None = None


def _item(
    row: PageRow,
    language: str | None = None,
    group: dict[str, Any] | None = None,
    response: dict[str, str] | None = None,
) -> InboxItem:
    detail: dict[str, Any] = row.detail
    # Translations ride in the detail: the reader's language is picked here,
    # field by field (the page costs the same whatever the languages held).
    translations = detail.get("translations")
    shown = localized(detail, translations, language) if translations and language in translations else detail
    return InboxItem(
        id=row.ref,
        kind=detail.get("kind") or KIND_BY_PREFIX.get(row.ref[:1], "message"),
        category=detail["category"],
        title=shown.get("title", ""),
        summary=shown.get("summary", ""),
        created_at=ms_to_datetime(row.score),
        read=row.read,
        body_html=shown.get("body_html", ""),
        images=list(detail.get("images") or []),
        link=detail.get("link") or None,
        # Details written before items named their sender have no such field:
        # None (the system) until a drift repair or rebuild writes them again.
        sender=detail.get("sender") or None,
        actions=list(detail.get("actions") or ()),
        response=response,
        group=group,
    )


# Answers' times as every response writes times (ISO 8601 with an offset).
_TIME = TimeField()


@lru_cache(maxsize=16_384)
def _response(action: str, at_ms: int) -> dict[str, str]:
    """An answer as the item shows it, built once per distinct answer: a
    polled page shows the same answers again and again (callers never mutate
    the dict)."""
    return {"action": action, "at": _TIME.to_representation(ms_to_datetime(at_ms))}


def _answers(user_id: int, rows: Sequence[PageRow], *, degraded: bool, read: bool) -> dict[str, dict[str, str]]:
    """The user's answers to the actions of these rows, by ref. ``read``: the
    rows carry them (page.lua's fast path read them with the page); else one
    ZMSCORE of the user's answers when a row has actions, nothing otherwise
    (PostgreSQL when Redis is down)."""
    actions = {row.ref: row.detail["actions"] for row in rows if row.detail.get("actions")}
    refs = list(actions)
    if not refs:
        return {}
    found: dict[str, tuple[str, int]] = {}
    if read:
        found = {row.ref: row.response for row in rows if row.response is not None}
    else:
        try:
            if degraded:
                raise RedisError("the page came from PostgreSQL")
            found = responses_rm.responses_get(user_id=user_id, actions=actions)
        except RedisError:
            rows_pg = MessageResponse.objects.filter(user_id=user_id, message_id__in=[int(ref[1:]) for ref in refs])
            # Whole milliseconds, as Redis keeps them: both paths show the same time.
            found = {f"m{m}": (a, to_ms(at)) for m, a, at in rows_pg.values_list("message_id", "action", "at")}
    return {ref: _response(*found[ref]) for ref in refs if ref in found}


def grouped_items(
    *,
    user_id: int,
    rows: Sequence[PageRow],
    degraded: bool = False,
    with_groups: bool = True,
    groups_read: bool = False,
    responses_read: bool = False,
    language: str | None = None,
) -> list[InboxItem]:
    """The page's items in the reader's language, each grouped row with its
    group and each item with actions with the reader's answer. Groups and
    answers are read with the page (page.lua's fast path) or else by one
    lookup each (HMGET, ZMSCORE) of the rows that need them (none when no row
    has a group key, or actions), so a page costs the same whatever the number or size of the
    groups."""
    grouped = [row.ref for row in rows if with_groups and row.group is None and row.detail.get("group_key")]
    groups: dict[str, dict[str, Any]] = {row.ref: row.group for row in rows if with_groups and row.group is not None}
    if grouped and not degraded and not groups_read:
        try:
            groups.update(readmodel_grouping.groups_of(user_id=user_id, refs=grouped))
        except RedisError as exc:
            logger.warning("redis unavailable (%s); groups of user %s left out", exc, user_id)
    answers = _answers(user_id, rows, degraded=degraded, read=responses_read)
    return [_item(row, language, groups.get(row.ref), answers.get(row.ref)) for row in rows]


def category_validate(category: str | None) -> None:
    if category is not None and category not in CATEGORIES:
        raise ValidationFailed(
            f"Unknown category {category!r}.",
            code="invalid_category",
            fields={"category": [f"Choose from {', '.join(CATEGORIES)}."]},
        )


def query_validate(query: str | None) -> None:
    if query is not None and len(query) > listing.QUERY_MAX_LENGTH:
        raise ValidationFailed(
            f"The search text is longer than {listing.QUERY_MAX_LENGTH} characters.",
            code="invalid_q",
            fields={"q": [f"At most {listing.QUERY_MAX_LENGTH} characters."]},
        )


def _cursor_position(
    cursor: str, *, category: str | None, unread_only: bool, archived: bool = False, query: str | None = None
) -> tuple[int, int]:
    payload = decode_cursor(cursor, scope=CURSOR_SCOPE)
    try:
        score, skip = int(payload["p"]), int(payload["o"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValidationFailed(
            "The cursor is not valid.", code="invalid_cursor", fields={"cursor": ["Invalid cursor."]}
        ) from exc
    # A cursor belongs to one listing: reusing it with other filters would skip items.
    if (
        payload.get("c") != (category or "")
        or bool(payload.get("u")) != unread_only
        or bool(payload.get("a")) != archived
        or (payload.get("q") or "") != (query or "")
        or skip < 0
    ):
        raise ValidationFailed(
            "The cursor belongs to another listing.", code="invalid_cursor", fields={"cursor": ["Invalid cursor."]}
        )
    return score, skip


def _redis_down(what: str, user: AbstractBaseUser, exc: RedisError) -> None:
    logger.warning("redis unavailable (%s); %s of user %s from PostgreSQL", exc, what, user.pk)


def inbox_list(
    *,
    user: AbstractBaseUser,
    category: str | None = None,
    unread_only: bool = False,
    limit: int = 20,
    cursor: str | None = None,
    since: datetime | None = None,
    now: datetime | None = None,
    archived: bool = False,
    query: str | None = None,
    language: str | None = None,
) -> InboxPage:
    """A page of the user's inbox (or of its archived items), newest first,
    with whole-inbox counts; ``query`` keeps the items whose title or summary
    contains it (case-insensitive, any language).

    Paging is by max score plus offset: the cursor holds the last score returned and
    how many items at that score were returned, so items arriving meanwhile
    (newer, higher scores) never make a page repeat or skip. Both paths walk
    the same way, so a cursor stays valid when Redis goes down or comes back.
    """
    page, _cached = _inbox_list(
        user=user,
        category=category,
        unread_only=unread_only,
        limit=limit,
        cursor=cursor,
        since=since,
        now=now,
        archived=archived,
        query=query,
        language=language,
    )
    assert page is not None  # noqa: S101 - no cache field, no cached rendering
    return page


def inbox_list_rendered(
    *,
    user: AbstractBaseUser,
    render: Callable[[InboxPage], bytes],
    category: str | None = None,
    unread_only: bool = False,
    limit: int = 20,
    since: datetime | None = None,
    cursor: str | None = None,
    now: datetime | None = None,
    archived: bool = False,
    query: str | None = None,
    language: str | None = None,
) -> bytes:
    """``render(inbox_list(...))``, served from the user's page cache when it
    holds a current rendering of this first page (no cursor, no ``since``):
    a polled inbox costs one script call and no rendering. The script decides
    whether the rendering is current (_cache.lua, "Read cache")."""
    # The archived list and searches are not kept in the page cache.
    first_page = not (cursor or since or archived or query)
    field = (
        _page_cache_field(category=category, unread_only=unread_only, limit=limit, language=language)
        if first_page
        else ""
    )
    page, cached = _inbox_list(
        user=user,
        category=category,
        unread_only=unread_only,
        limit=limit,
        cursor=cursor,
        since=since,
        now=now,
        cache_field=field,
        archived=archived,
        query=query,
        language=language,
    )
    if cached is not None:
        return cached
    assert page is not None  # noqa: S101
    body = render(page)
    if page.cache_tag is not None:
        try:
            inbox.page_cache_put(user_id=int(user.pk), field=field, tag=page.cache_tag, body=body)
        except RedisError:
            logger.warning("redis unavailable; page of user %s not cached", user.pk)
    return body


def _page_cache_field(*, category: str | None, unread_only: bool, limit: int, language: str | None = None) -> str:
    """The page cache's field of a first page's query (a rendering is in one language)."""
    field = f"{category or ''}|{int(unread_only)}|{limit}"
    return f"{field}|{language}" if language and language != settings.LANGUAGE_CODE else field


def _inbox_list(
    *,
    user: AbstractBaseUser,
    category: str | None,
    unread_only: bool,
    limit: int,
    cursor: str | None,
    since: datetime | None,
    now: datetime | None,
    cache_field: str = "",
    archived: bool = False,
    query: str | None = None,
    language: str | None = None,
) -> tuple[InboxPage | None, bytes | None]:
    category_validate(category)
    query_validate(query)
    query = query or None
    max_score, skip = (None, 0)
    if cursor:
        max_score, skip = _cursor_position(
            cursor, category=category, unread_only=unread_only, archived=archived, query=query
        )
    now = now or timezone.now()
    user_id = int(user.pk)
    filters: dict[str, Any] = {
        "category": category,
        "max_score": max_score,
        "skip": skip,
        "limit": limit,
        "unread_only": unread_only,
        "since_ms": to_ms(since) if since else None,
    }
    degraded = False
    page: Page

    def read() -> Page | CachedPage:
        if archived or query:
            return inbox.inbox_listing(
                user_id=user_id, now_ms=to_ms(now), archived=archived, query=query, language=language, **filters
            )
        return inbox.inbox_page(user_id=user_id, now_ms=to_ms(now), cache_field=cache_field, **filters)

    try:
        healing.require_ready()
        result = inbox_served(user_id, read)
        if isinstance(result, CachedPage):
            return None, result.body
        page = result
    except RedisError as exc:
        _redis_down("inbox page", user, exc)
        page = fallback.inbox_page(
            user_id=user_id, now=now, archived=archived, query=query, language=language, **filters
        )
        degraded = True
    return _inbox_page_of(
        page,
        user_id=user_id,
        category=category,
        unread_only=unread_only,
        archived=archived,
        query=query,
        degraded=degraded,
        language=language,
    ), None


def _inbox_page_of(
    page: Page,
    *,
    user_id: int = 0,
    category: str | None,
    unread_only: bool,
    archived: bool = False,
    query: str | None = None,
    degraded: bool = False,
    language: str | None = None,
) -> InboxPage:
    """The API's page of a read model's (or fallback's) page: its items and
    the cursor of the page after it."""
    next_cursor = None
    if page.next_position is not None:
        score, offset = page.next_position
        position: dict[str, Any] = {"p": score, "o": offset, "c": category or "", "u": unread_only}
        if archived:
            position["a"] = True
        if query:
            position["q"] = query
        next_cursor = encode_cursor(position, scope=CURSOR_SCOPE)
    return InboxPage(
        results=grouped_items(
            user_id=user_id,
            rows=page.rows,
            degraded=degraded,
            groups_read=page.groups_read,
            responses_read=page.responses_read,
            language=language,
        ),
        next_cursor=next_cursor,
        unread_count=page.counts.unread,
        unseen_count=page.counts.unseen,
        degraded=degraded,
        cache_tag=page.cache_tag,
    )


def inbox_item_get(
    *, user: AbstractBaseUser, item_id: str, now: datetime | None = None, language: str | None = None
) -> InboxItem:
    """The item with its detail; NotFound unless it is live in this user's inbox."""
    if not item_id or len(item_id) > 40 or "|" in item_id:
        raise NotFound("No such item in your inbox.")
    now = now or timezone.now()
    try:
        healing.require_ready()
        row = inbox_served(int(user.pk), lambda: inbox.inbox_get(user_id=int(user.pk), ref=item_id, now_ms=to_ms(now)))
        if row is None:
            # Not a 404 from a Redis that lost its data a moment ago.
            healing.confirm_ready()
    except RedisError as exc:
        _redis_down("inbox item", user, exc)
        row = fallback.inbox_get(user_id=int(user.pk), ref=item_id, now=now)
        degraded = True
    else:
        degraded = False
    if row is None:
        raise NotFound("No such item in your inbox.")
    return grouped_items(user_id=int(user.pk), rows=[row], degraded=degraded, language=language)[0]


def inbox_counts(*, user: AbstractBaseUser, now: datetime | None = None) -> dict[str, Any]:
    """``{"unread", "unseen", "by_category": {...categories, "announcement"}}``."""
    now = now or timezone.now()
    now_ms = to_ms(now)
    counts: Counts | None = None
    announcements: dict[str, int] | None = None
    try:
        healing.require_ready()
        # One round trip for both when it can: the inbox's fast counts and the
        # user's cached announcement count, pipelined.
        call = announcement_count_call(user=user, now=now)
        both = (
            None
            if call is None
            else inbox_served(
                int(user.pk),
                lambda: inbox.inbox_counts_alongside(
                    user_id=int(user.pk),
                    now_ms=now_ms,
                    script=COUNT_SCRIPT,
                    script_keys=call.keys,
                    script_args=call.args(),
                ),
            )
        )
        if call is not None and both is not None:
            counts, reply = both
            announcements = announcement_count_settle(call, reply)
        else:
            counts = inbox_served(int(user.pk), lambda: inbox.inbox_counts(user_id=int(user.pk), now_ms=now_ms))
    except RedisError as exc:
        _redis_down("inbox counts", user, exc)
        if counts is None:
            counts = fallback.inbox_counts(user_id=int(user.pk), now=now)
    if announcements is None:
        announcements = announcement_counts(user=user, now=now)
    by_category: dict[str, int] = dict(counts.unread_by_category)
    by_category["announcement"] = int(announcements["unread"])
    return _counts_answer(counts.unread, counts.unseen, tuple(by_category.items()))


def _counts_answer(unread: int, unseen: int, by_category: tuple[tuple[str, int], ...]) -> dict[str, Any]:
    categories = dict(by_category)
    # The bell's number: the inbox's unread items and the unread announcements.
    total = unread + int(categories.get("announcement", 0))
    return {"unread": unread, "unseen": unseen, "by_category": categories, "total_unread": total}


def user_group_member_count(*, group: UserGroup) -> int:
    return UserGroupMembership.objects.filter(group=group).count()


def message_progress(*, message: Message) -> tuple[int, int]:
    """(users pushed so far, users to push) of a push fan-out, for the admin."""
    done = sum(FanoutChunk.objects.filter(message=message).values_list("size", flat=True))
    return done, message.fanout_total


def users_resolve(*, text: str) -> tuple[list[int], list[str]]:
    """Ids of the users named in a pasted list (usernames or ids, separated by
    spaces, commas, semicolons or new lines), and the tokens that match nobody."""
    tokens = [t for t in re.split(r"[\s,;]+", text or "") if t]
    numbers = {int(t) for t in tokens if t.isdigit()}
    names = {t for t in tokens if not t.isdigit()}
    User = get_user_model()
    found_ids = set(User.objects.filter(pk__in=numbers).values_list("pk", flat=True))
    by_name = dict(User.objects.filter(username__in=names).values_list("username", "pk"))
    unknown = [t for t in tokens if (t.isdigit() and int(t) not in found_ids) or (not t.isdigit() and t not in by_name)]
    ids = sorted(found_ids | set(by_name.values()))
    return ids, list(dict.fromkeys(unknown))


def users_active_count() -> int:
    """How many accounts "everyone" reaches now: the active users."""
    return get_user_model().objects.filter(is_active=True).count()


def user_groups_member_count(*, group_ids: Sequence[int]) -> int:
    """Distinct members of these groups (someone in two of them counts once)."""
    if not group_ids:
        return 0
    return UserGroupMembership.objects.filter(group_id__in=list(group_ids)).values("user_id").distinct().count()


def item_refs_at_slots(month: int, offsets: list[int]) -> list[str]:
    """Refs of the items holding these bitmap slots of ``month`` (messages,
    bulletins, notifications: a slot belongs to one item); unknown ones are left out."""
    if not offsets:
        return []
    refs: list[str] = []
    for model in (Message, Bulletin, Notification):
        for start in range(0, len(offsets), 10_000):
            batch = offsets[start : start + 10_000]
            pks = model.objects.filter(slot_month=month, slot_offset__in=batch).values_list("pk", flat=True)
            refs.extend(model(pk=pk).ref for pk in pks)
    return refs


# --- The user's own preferences -------------------------------------------------


@dataclass(frozen=True)
class Preferences:
    muted_categories: list[str]
    muted_message_types: list[str]  # codes
    email_digest: str
    # Every category with its email choice and web_push flag (defaults filled in).
    channels: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    quiet_hours: dict[str, str] | None = None  # {"start", "end", "timezone"}
    language: str | None = None


def preferences_get(*, user_id: int) -> Preferences:
    """What the user mutes now (their open periods) and their digest choice."""
    # mc_muteperiod_open_category / _open_type (partial on end_ms IS NULL) serve this.
    rows = MutePeriod.objects.filter(user_id=user_id, end_ms__isnull=True).values_list("category", "message_type__code")
    categories = sorted({c for c, code in rows if not code}, key=CATEGORIES.index)
    codes = sorted(code for _c, code in rows if code)
    row = (
        UserPreferences.objects.filter(user_id=user_id)
        .values_list("email_digest", "channels", "quiet_start", "quiet_end", "quiet_timezone", "language")
        .first()
    )
    digest, channels, start, end, zone, language = row or ("", {}, None, None, "", "")
    quiet = quiet_hours_of(start, end, zone)
    return Preferences(
        categories,
        codes,
        # A user who never chose follows the operator's default.
        digest or settings.MESSAGECENTER_DIGEST_DEFAULT,
        channels=channels_view(channels),
        quiet_hours=quiet.as_dict() if quiet is not None else None,
        language=language or None,
    )


def muted_among(
    *, user_ids: Sequence[int], category: str, time_ms: int, message_type_id: int | None = None
) -> set[int]:
    """The users among ``user_ids`` from whom an item of this category (and
    message type) at ``time_ms`` is hidden: delivery skips them. One query
    per batch of users, the batch as one array (``core.api.lookups``;
    mc_muteperiod_user_idx serves it)."""
    target = Q(category=category)
    if message_type_id is not None:
        target |= Q(message_type_id=message_type_id)
    muted: set[int] = set()
    for start in range(0, len(user_ids), MUTED_AMONG_BATCH):
        rows = MutePeriod.objects.filter(target, user_id__any_of=Whole(user_ids[start : start + MUTED_AMONG_BATCH]))
        rows = rows.filter(start_ms__lt=time_ms).filter(Q(end_ms__isnull=True) | Q(end_ms__gte=time_ms))
        muted.update(rows.order_by().values_list("user_id", flat=True))
    return muted


MUTED_AMONG_BATCH = 5000


def message_types_all() -> list[MessageType]:
    return list(MessageType.objects.order_by("code"))


def self_service_types() -> list[MessageType]:
    return list(MessageType.objects.filter(self_service=True).order_by("code"))


def user_subscriptions(*, user_id: int) -> list[Subscription]:
    """The user's own subscriptions (not those through a group), oldest first."""
    return list(Subscription.objects.filter(user_id=user_id).select_related("message_type").order_by("id"))


def user_group_subscriptions(*, user_id: int) -> list[Subscription]:
    """The subscriptions the user gets through their groups (read-only for them)."""
    groups = UserGroupMembership.objects.filter(user_id=user_id).values("group_id")
    return list(
        Subscription.objects.filter(group_id__in=groups)
        .select_related("message_type", "group")
        .order_by("message_type__code", "scope", "group__name")
    )
