"""Server-rendered inbox pages: thin adapters over the same selectors and
services as the API. State changes are POST forms with CSRF.

With Redis down the selectors answer from PostgreSQL, so the pages render as
usual (the list says live updates are paused); only a write the services
refuse renders the "unavailable" page.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import AbstractBaseUser
from django.db import DatabaseError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST

from core.api.errors import ApplicationError, Conflict, NotFound, ValidationFailed
from core.api.params import parse_limit
from core.api.translations import reader_language
from core.replicas import is_database_outage
from messagecenter import channel_prefs, channel_selectors, selectors, services
from messagecenter.exceptions import InboxUnavailable
from messagecenter.labels import CATEGORY_LABELS, group_actors_line
from messagecenter.models import CATEGORIES, EmailDigest
from messagecenter.quiet import time_zones
from messagecenter.readmodel.listing import QUERY_MAX_LENGTH
from messagecenter.services import digests

# The list's filter chips: per category (the API's filter, CATEGORY_LABELS) and per kind.
KIND_LABELS = {
    "message": _("Messages"),
    "bulletin": _("Bulletins"),
    "notification": _("Notifications"),
    "announcement": _("Announcements"),
}


def _unavailable(request: HttpRequest) -> HttpResponse:
    return render(request, "messagecenter/unavailable.html", status=503)


def _page_size(raw: str) -> int:
    # A bad limit in a page's address falls back to the default page size.
    try:
        return parse_limit(raw)
    except ValidationFailed:
        return parse_limit(None)


@dataclass(frozen=True)
class _ListView:
    """The list's view as its address asks: filters, page size and search."""

    category: str
    kind: str
    archived: bool
    unread_only: bool
    limit: int
    query: str

    @classmethod
    def of(cls, request: HttpRequest) -> "_ListView":
        category = request.GET.get("category") or ""
        if category not in CATEGORIES:
            category = ""
        kind = request.GET.get("kind") or ""
        if kind not in KIND_LABELS or category:
            kind = ""
        archived = request.GET.get("archived") == "true"
        return cls(
            category=category,
            kind=kind,
            archived=archived,
            unread_only=request.GET.get("unread") == "true" and not archived,
            limit=_page_size(request.GET.get("limit", "")),
            # The search box's text: the API's ``q``, cut to its limit rather than an
            # error page (the box itself does not take more).
            query=(request.GET.get("q") or "").strip()[:QUERY_MAX_LENGTH],
        )

    def filters(self) -> dict[str, str]:
        """The view without the search: where "Clear search" leads."""
        pairs = (
            ("category", self.category),
            ("kind", self.kind),
            ("unread", "true" if self.unread_only else ""),
            ("archived", "true" if self.archived else ""),
        )
        return {key: value for key, value in pairs if value}


def _chips(view: _ListView, by_category: dict[str, int], total_unread: int) -> list[dict[str, Any]]:
    return [
        {
            "param": "",
            "value": "",
            "label": _("All"),
            "unread": total_unread,
            "current": not (view.category or view.kind),
        },
        *(
            {
                "param": "category",
                "value": value,
                "label": label,
                "unread": by_category.get(value, 0),
                "current": view.category == value,
            }
            for value, label in CATEGORY_LABELS.items()
        ),
        *(
            {
                "param": "kind",
                "value": value,
                "label": label,
                "unread": by_category.get("announcement", 0) if value == "announcement" else None,
                "current": view.kind == value,
            }
            for value, label in KIND_LABELS.items()
        ),
    ]


def _rows(results: Iterable[Any], kind: str) -> list[dict[str, Any]]:
    if kind == "announcement":
        return []
    return [
        {
            "item": item,
            "category_label": CATEGORY_LABELS.get(item.category, item.category),
            "group_line": group_actors_line(item.group) if item.group else "",
        }
        for item in results
        if not kind or item.kind == kind
    ]


@login_required
def inbox_page(request: HttpRequest) -> HttpResponse:
    """The list's frame: filters, counts and the actions. inbox.js fills the
    rows from the same API other clients use (one renderer for the first page,
    "Load more", the live updates, the Archived view and announcements)."""
    view = _ListView.of(request)
    filters = view.filters()
    # The first page is rendered here too: readable without JavaScript, and
    # shown at once (inbox.js swaps in its own rows, announcements merged).
    page = selectors.inbox_list(
        user=request.user,  # type: ignore[arg-type]
        category=view.category or None,
        unread_only=view.unread_only,
        archived=view.archived,
        limit=view.limit,
        query=view.query or None,
        language=reader_language(request, request.user.pk),
    )
    counts = selectors.inbox_counts(user=request.user)  # type: ignore[arg-type]
    by_category = counts["by_category"]
    total_unread = counts.get("total_unread", counts["unread"] + by_category.get("announcement", 0))
    return render(
        request,
        "messagecenter/inbox.html",
        {
            "chips": _chips(view, by_category, total_unread),
            "category": view.category,
            "kind": view.kind,
            "archived": view.archived,
            "unread_only": view.unread_only,
            "limit": view.limit,
            "query": view.query,
            "query_max_length": QUERY_MAX_LENGTH,
            "filters": filters,
            "clear_search_url": reverse("messagecenter:inbox") + (f"?{urlencode(filters)}" if filters else ""),
            "page": page,
            "rows": _rows(page.results, view.kind),
            "counts": counts,
            "total_unread": total_unread,
            "announcements_unread": by_category.get("announcement", 0),
        },
    )


@login_required
def inbox_item_page(request: HttpRequest, item_id: str) -> HttpResponse:
    try:
        item = selectors.inbox_item_get(
            user=request.user,  # type: ignore[arg-type]
            item_id=item_id,
            language=reader_language(request, request.user.pk),
        )
        if not item.read:
            # Pages mark on open (the API needs the explicit POST).
            services.inbox_mark_read(user=request.user, item_id=item_id)  # type: ignore[arg-type]
    except NotFound as exc:
        raise Http404(gettext("No such item in your inbox.")) from exc
    except InboxUnavailable:
        # The item was read from PostgreSQL but the mark was refused: show it
        # anyway; it stays unread in the list, which is the truth.
        pass
    except DatabaseError as exc:
        if not is_database_outage(exc):
            raise
        # Read from Redis while PostgreSQL is down: the mark on open waits for
        # another visit; the item itself is shown.
    label = CATEGORY_LABELS.get(item.category, item.category)
    return render(request, "messagecenter/item.html", {"item": item, "category_label": label})


@login_required
@require_POST
def inbox_read_all(request: HttpRequest) -> HttpResponse:
    category = request.POST.get("category") or None
    if category is not None and category not in CATEGORIES:
        category = None
    try:
        marked = services.inbox_mark_all_read(user=request.user, category=category)  # type: ignore[arg-type]
    except InboxUnavailable:
        return _unavailable(request)
    messages.success(
        request,
        ngettext("Marked %(count)d item as read.", "Marked %(count)d items as read.", marked) % {"count": marked},
    )
    url = reverse("messagecenter:inbox")
    return redirect(f"{url}?category={category}" if category else url)


def _back_to_inbox(request: HttpRequest, fallback: str) -> HttpResponse:
    """A redirect to the form's ``next`` when it is a page of the inbox (never
    another site or path), else to ``fallback``."""
    next_url = request.POST.get("next") or ""
    if not next_url.startswith("/inbox/") or next_url.startswith("//"):
        next_url = fallback
    return redirect(next_url)


@login_required
@require_POST
def inbox_hide(request: HttpRequest, item_id: str) -> HttpResponse:
    try:
        services.inbox_hide(user=request.user, item_id=item_id)  # type: ignore[arg-type]
    except NotFound as exc:
        raise Http404(gettext("No such item in your inbox.")) from exc
    except InboxUnavailable:
        return _unavailable(request)
    messages.success(request, gettext("Deleted from your inbox."))
    return _back_to_inbox(request, reverse("messagecenter:inbox"))


@login_required
@require_POST
def inbox_respond(request: HttpRequest, item_id: str) -> HttpResponse:
    """The answer buttons' form (pages without JavaScript; inbox.js calls the API)."""
    try:
        services.message_respond(user=request.user, item_id=item_id, action=request.POST.get("action") or "")  # type: ignore[arg-type]
    except NotFound as exc:
        raise Http404(gettext("No such item in your inbox.")) from exc
    except InboxUnavailable:
        return _unavailable(request)
    except Conflict:
        messages.info(request, gettext("You already answered this."))
    except ValidationFailed:
        messages.error(request, gettext("That answer is not one of this item's."))
    else:
        messages.success(request, gettext("Your answer was sent."))
    return _back_to_inbox(request, reverse("messagecenter:item", args=[item_id]))


def _preferences_save(request: HttpRequest, user: AbstractBaseUser) -> None:
    # The form always posts the digest it showed: only a change is a
    # choice, so saving mutes keeps a user on the operator's default.
    digest = request.POST.get("email_digest") or None
    if digest is not None and digest == request.POST.get("email_digest_shown"):
        digest = None
    services.preferences_update(
        user=user,
        muted_categories=request.POST.getlist("muted_categories"),
        muted_message_types=request.POST.getlist("muted_message_types"),
        email_digest=digest,
    )
    messages.success(request, gettext("Preferences saved."))


def _channels_saved(request: HttpRequest, user: AbstractBaseUser) -> None:
    _channels_save(request, user)
    messages.success(request, gettext("Channel settings saved."))


def _posted_id(request: HttpRequest, missing: str) -> int:
    """The ``subscription`` the form names; NotFound with ``missing`` when it names none."""
    raw = request.POST.get("subscription") or ""
    if not raw.isdigit():
        raise NotFound(missing)
    return int(raw)


def _push_remove(request: HttpRequest, user: AbstractBaseUser) -> None:
    subscription_id = _posted_id(request, gettext("No such device of yours."))
    services.push_subscription_delete(user=user, subscription_id=subscription_id)
    messages.success(request, gettext("The device will get no more notifications."))


def _follow(request: HttpRequest, user: AbstractBaseUser) -> None:
    services.subscription_self_create(
        user=user,
        message_type=request.POST.get("message_type") or "",
        scope=request.POST.get("scope") or "",
    )
    messages.success(request, gettext("Subscribed."))


def _unfollow(request: HttpRequest, user: AbstractBaseUser) -> None:
    subscription_id = _posted_id(request, gettext("No such subscription of yours."))
    services.subscription_self_delete(user=user, subscription_id=subscription_id)
    messages.success(request, gettext("Unsubscribed."))


# The settings page's forms, by the ``action`` each posts.
_SETTINGS_ACTIONS: dict[str, Callable[[HttpRequest, AbstractBaseUser], None]] = {
    "preferences": _preferences_save,
    "channels": _channels_saved,
    "push_remove": _push_remove,
    "follow": _follow,
    "unfollow": _unfollow,
}


def _settings_context(user_id: int) -> dict[str, Any]:
    prefs = selectors.preferences_get(user_id=user_id)
    return {
        "categories": [
            {"value": c, "label": CATEGORY_LABELS[c], "muted": c in prefs.muted_categories} for c in CATEGORIES
        ],
        "message_types": [
            {"code": t.code, "name": t.name, "muted": t.code in prefs.muted_message_types}
            for t in selectors.message_types_all()
        ],
        "digests": [
            {"value": d.value, "label": d.label, "current": d.value == prefs.email_digest} for d in EmailDigest
        ],
        "self_service_types": selectors.self_service_types(),
        "own_subscriptions": selectors.user_subscriptions(user_id=user_id),
        "group_subscriptions": selectors.user_group_subscriptions(user_id=user_id),
        "channel_rows": [
            {
                "value": c,
                "label": CATEGORY_LABELS[c],
                "email": prefs.channels[c]["email"],
                "web_push": prefs.channels[c]["web_push"],
            }
            for c in CATEGORIES
        ],
        "email_choices": EMAIL_CHOICE_LABELS.items(),
        "quiet_hours": prefs.quiet_hours,
        "time_zones": sorted(time_zones()),
        "channel_languages": settings.LANGUAGES,
        "language": prefs.language or "",
        "devices": channel_selectors.push_subscriptions_of(user_id=user_id),
    }


@login_required
def settings_page(request: HttpRequest) -> HttpResponse:
    """The user's own settings: mutes, digest, follows. Plain POST forms (CSRF),
    each naming its ``action``; every change goes through the services."""
    user = cast(AbstractBaseUser, request.user)  # login_required: never anonymous
    if request.method == "POST":
        action = _SETTINGS_ACTIONS.get(request.POST.get("action") or "")
        try:
            if action is not None:
                action(request, user)
        except ApplicationError as exc:
            messages.error(request, exc.message)
        return redirect(reverse("messagecenter:settings"))
    return render(request, "messagecenter/settings.html", _settings_context(int(user.pk)))


EMAIL_CHOICE_LABELS = {
    channel_prefs.EMAIL_IF_UNREAD: _("If still unread"),
    channel_prefs.EMAIL_DIGEST: _("In the digest"),
    channel_prefs.EMAIL_OFF: _("Off"),
}


def _channels_save(request: HttpRequest, user: AbstractBaseUser) -> None:
    """The channel grid, quiet hours and language of the settings form, through
    the one preferences service (which checks them all before writing)."""
    post = request.POST
    channels = {
        c: {"email": post.get(f"email_{c}") or "", "web_push": post.get(f"web_push_{c}") == "on"} for c in CATEGORIES
    }
    quiet = (
        {
            "start": post.get("quiet_start") or "",
            "end": post.get("quiet_end") or "",
            "timezone": post.get("quiet_timezone") or "",
        }
        if post.get("quiet_enabled") == "on"
        else None
    )
    services.preferences_update(user=user, channels=channels, quiet_hours=quiet, language=post.get("language") or None)


# Mail clients POST this address themselves (RFC 8058), as for the digests.
@csrf_exempt
@require_http_methods(["GET", "POST"])
def channel_unsubscribe(request: HttpRequest, token: str) -> HttpResponse:
    """GET: a page asking to confirm; POST: e-mails of the token's category (or
    of every category) are off. A bad token is a 400 and changes nothing."""
    try:
        if request.method == "POST":
            services.channel_unsubscribe(token=token)
            return render(request, "messagecenter/channel_unsubscribe.html", {"done": True})
        _user, category = services.channel_token_user(token=token)
    except ValidationFailed:
        return render(request, "messagecenter/channel_unsubscribe.html", {"invalid": True}, status=400)
    label = CATEGORY_LABELS.get(category)
    return render(request, "messagecenter/channel_unsubscribe.html", {"token": token, "category_label": label})


# Mail clients POST this address themselves (RFC 8058 one-click unsubscribe),
# with no session and no CSRF token: the signed token in the address is what
# authorises the change, and all it can do is turn that user's digest off.
@csrf_exempt
@require_http_methods(["GET", "POST"])
def digest_unsubscribe(request: HttpRequest, token: str) -> HttpResponse:
    """GET: a page asking to confirm (a link scanner must not unsubscribe
    anyone); POST: the digest is off. A bad token is a 400 and changes nothing."""
    try:
        if request.method == "POST":
            digests.digest_unsubscribe(token=token)
            return render(request, "messagecenter/digest_unsubscribe.html", {"done": True})
        digests.digest_token_user(token=token)
    except ValidationFailed:
        return render(request, "messagecenter/digest_unsubscribe.html", {"invalid": True}, status=400)
    return render(request, "messagecenter/digest_unsubscribe.html", {"token": token})
