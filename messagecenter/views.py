"""Server-rendered inbox pages: thin adapters over the same selectors and
services as the API. State changes are POST forms with CSRF.

With Redis down the selectors answer from PostgreSQL, so the pages render as
usual (the list says live updates are paused); only a write the services
refuse renders the "unavailable" page.
"""

from typing import cast
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

from core.exceptions import ApplicationError, NotFound, ValidationFailed, is_database_outage
from core.params import parse_limit
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


@login_required
def inbox_page(request: HttpRequest) -> HttpResponse:
    """The list's frame: filters, counts and the actions. inbox.js fills the
    rows from the same API other clients use (one renderer for the first page,
    "Load more", the live updates, the Archived view and announcements)."""
    category = request.GET.get("category") or ""
    if category not in CATEGORIES:
        category = ""
    kind = request.GET.get("kind") or ""
    if kind not in KIND_LABELS or category:
        kind = ""
    archived = request.GET.get("archived") == "true"
    unread_only = request.GET.get("unread") == "true" and not archived
    limit = _page_size(request.GET.get("limit", ""))
    # The search box's text: the API's ``q``, cut to its limit rather than an
    # error page (the box itself does not take more).
    query = (request.GET.get("q") or "").strip()[:QUERY_MAX_LENGTH]
    # The view without the search: where "Clear search" leads.
    filters = {
        key: value
        for key, value in (
            ("category", category),
            ("kind", kind),
            ("unread", "true" if unread_only else ""),
            ("archived", "true" if archived else ""),
        )
        if value
    }
    # The first page is rendered here too: readable without JavaScript, and
    # shown at once (inbox.js swaps in its own rows, announcements merged).
    page = selectors.inbox_list(
        user=request.user,  # type: ignore[arg-type]
        category=category or None,
        unread_only=unread_only,
        archived=archived,
        limit=limit,
        query=query or None,
    )
    counts = selectors.inbox_counts(user=request.user)  # type: ignore[arg-type]
    by_category = counts["by_category"]
    total_unread = counts.get("total_unread", counts["unread"] + by_category.get("announcement", 0))
    chips = [
        {"param": "", "value": "", "label": _("All"), "unread": total_unread, "current": not (category or kind)},
        *(
            {
                "param": "category",
                "value": value,
                "label": label,
                "unread": by_category.get(value, 0),
                "current": category == value,
            }
            for value, label in CATEGORY_LABELS.items()
        ),
        *(
            {
                "param": "kind",
                "value": value,
                "label": label,
                "unread": by_category.get("announcement", 0) if value == "announcement" else None,
                "current": kind == value,
            }
            for value, label in KIND_LABELS.items()
        ),
    ]
    return render(
        request,
        "messagecenter/inbox.html",
        {
            "chips": chips,
            "category": category,
            "kind": kind,
            "archived": archived,
            "unread_only": unread_only,
            "limit": limit,
            "query": query,
            "query_max_length": QUERY_MAX_LENGTH,
            "filters": filters,
            "clear_search_url": reverse("messagecenter:inbox") + (f"?{urlencode(filters)}" if filters else ""),
            "page": page,
            "rows": [
                {
                    "item": item,
                    "category_label": CATEGORY_LABELS.get(item.category, item.category),
                    "group_line": group_actors_line(item.group) if item.group else "",
                }
                for item in page.results
                if not kind or item.kind == kind
            ]
            if kind != "announcement"
            else [],
            "counts": counts,
            "total_unread": total_unread,
            "announcements_unread": by_category.get("announcement", 0),
        },
    )


@login_required
def inbox_item_page(request: HttpRequest, item_id: str) -> HttpResponse:
    try:
        item = selectors.inbox_item_get(user=request.user, item_id=item_id)  # type: ignore[arg-type]
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
    next_url = request.POST.get("next") or ""
    if not next_url.startswith("/inbox/") or next_url.startswith("//"):
        next_url = reverse("messagecenter:inbox")
    return redirect(next_url)


@login_required
def settings_page(request: HttpRequest) -> HttpResponse:
    """The user's own settings: mutes, digest, follows. Plain POST forms (CSRF),
    each naming its ``action``; every change goes through the services."""
    user = cast(AbstractBaseUser, request.user)  # login_required: never anonymous
    user_id = int(user.pk)
    if request.method == "POST":
        action = request.POST.get("action")
        try:
            if action == "preferences":
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
            elif action == "channels":
                _channels_save(request, user)
                messages.success(request, gettext("Channel settings saved."))
            elif action == "push_remove":
                raw = request.POST.get("subscription") or ""
                if not raw.isdigit():
                    raise NotFound(gettext("No such device of yours."))
                services.push_subscription_delete(user=user, subscription_id=int(raw))
                messages.success(request, gettext("The device will get no more notifications."))
            elif action == "follow":
                services.subscription_self_create(
                    user=user,
                    message_type=request.POST.get("message_type") or "",
                    scope=request.POST.get("scope") or "",
                )
                messages.success(request, gettext("Subscribed."))
            elif action == "unfollow":
                raw = request.POST.get("subscription") or ""
                if not raw.isdigit():
                    raise NotFound(gettext("No such subscription of yours."))
                services.subscription_self_delete(user=user, subscription_id=int(raw))
                messages.success(request, gettext("Unsubscribed."))
        except ApplicationError as exc:
            messages.error(request, exc.message)
        return redirect(reverse("messagecenter:settings"))
    prefs = selectors.preferences_get(user_id=user_id)
    context = {
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
    return render(request, "messagecenter/settings.html", context)


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
