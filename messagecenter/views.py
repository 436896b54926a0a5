"""Server-rendered inbox pages: thin adapters over the same selectors and
services as the API. State changes are POST forms with CSRF.

With Redis down the selectors answer from PostgreSQL, so the pages render as
usual (the list says live updates are paused); only a write the services
refuse renders the "unavailable" page.
"""

from typing import cast

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import AbstractBaseUser
from django.db import DatabaseError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from core.exceptions import ApplicationError, NotFound, ValidationFailed, is_database_outage
from core.params import parse_limit
from messagecenter import selectors, services
from messagecenter.exceptions import InboxUnavailable
from messagecenter.models import CATEGORIES, EmailDigest

TAB_LABELS = {
    "": "All",
    "system": "System",
    "promotion": "Promotions",
    "transaction": "Transactions",
    "interaction": "Interactions",
}


def _unavailable(request: HttpRequest) -> HttpResponse:
    return render(request, "messagecenter/unavailable.html", status=503)


@login_required
def inbox_page(request: HttpRequest) -> HttpResponse:
    category = request.GET.get("category") or None
    if category is not None and category not in CATEGORIES:
        category = None
    unread_only = request.GET.get("unread") == "true"
    try:
        page = selectors.inbox_list(
            user=request.user,  # type: ignore[arg-type]
            category=category,
            unread_only=unread_only,
            limit=parse_limit(request.GET.get("limit")),
            cursor=request.GET.get("cursor") or None,
        )
    except ValidationFailed:
        return redirect(reverse("messagecenter:inbox"))
    counts = selectors.inbox_counts(user=request.user)  # type: ignore[arg-type]
    by_category = counts["by_category"]
    tabs = [
        {
            "value": value,
            "label": label,
            "unread": counts["unread"] if value == "" else by_category.get(value, 0),
            "current": (category or "") == value,
        }
        for value, label in TAB_LABELS.items()
    ]
    return render(
        request,
        "messagecenter/inbox.html",
        {
            "page": page,
            "tabs": tabs,
            "category": category or "",
            "category_label": TAB_LABELS[category or ""],
            "unread_only": unread_only,
            "counts": counts,
            # Only the newest page refreshes itself live: older pages stay put while read.
            # A degraded answer (Redis down) has no live updates to follow.
            "page_is_first": not request.GET.get("cursor") and not page.degraded,
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
        raise Http404("No such item in your inbox.") from exc
    except InboxUnavailable:
        # The item was read from PostgreSQL but the mark was refused: show it
        # anyway; it stays unread in the list, which is the truth.
        pass
    except DatabaseError as exc:
        if not is_database_outage(exc):
            raise
        # Read from Redis while PostgreSQL is down: the mark on open waits for
        # another visit; the item itself is shown.
    return render(request, "messagecenter/item.html", {"item": item})


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
    messages.success(request, f"Marked {marked} item{'s' if marked != 1 else ''} as read.")
    url = reverse("messagecenter:inbox")
    return redirect(f"{url}?category={category}" if category else url)


@login_required
@require_POST
def inbox_hide(request: HttpRequest, item_id: str) -> HttpResponse:
    try:
        services.inbox_hide(user=request.user, item_id=item_id)  # type: ignore[arg-type]
    except NotFound as exc:
        raise Http404("No such item in your inbox.") from exc
    except InboxUnavailable:
        return _unavailable(request)
    messages.success(request, "Deleted from your inbox.")
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
                services.preferences_update(
                    user=user,
                    muted_categories=request.POST.getlist("muted_categories"),
                    muted_message_types=request.POST.getlist("muted_message_types"),
                    email_digest=request.POST.get("email_digest") or None,
                )
                messages.success(request, "Preferences saved.")
            elif action == "follow":
                services.subscription_self_create(
                    user=user,
                    message_type=request.POST.get("message_type") or "",
                    scope=request.POST.get("scope") or "",
                )
                messages.success(request, "Subscribed.")
            elif action == "unfollow":
                raw = request.POST.get("subscription") or ""
                if not raw.isdigit():
                    raise NotFound("No such subscription of yours.")
                services.subscription_self_delete(user=user, subscription_id=int(raw))
                messages.success(request, "Unsubscribed.")
        except ApplicationError as exc:
            messages.error(request, exc.message)
        return redirect(reverse("messagecenter:settings"))
    prefs = selectors.preferences_get(user_id=user_id)
    context = {
        "categories": [{"value": c, "label": TAB_LABELS[c], "muted": c in prefs.muted_categories} for c in CATEGORIES],
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
    }
    return render(request, "messagecenter/settings.html", context)
