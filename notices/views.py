"""Server-rendered announcement pages (login required)."""

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from core.api.errors import NotFound, ValidationFailed
from core.api.params import parse_limit
from notices import selectors, services
from notices.exceptions import ReadStateUnavailable


@login_required
def announcement_list_page(request: HttpRequest) -> HttpResponse:
    """Pinned ones first (on the first page), then everything newest first, "older" by cursor."""
    cursor = request.GET.get("cursor") or None
    try:
        page = selectors.announcement_list(
            user=request.user, limit=parse_limit(request.GET.get("limit")), cursor=cursor
        )
    except ValidationFailed:
        return render(request, "400.html", status=400)
    pinned = selectors.announcement_pinned(user=request.user) if cursor is None else []
    pinned_ids = {item.announcement.pk for item in pinned}
    items = [item for item in page.items if item.announcement.pk not in pinned_ids]
    context = {"pinned": pinned, "items": items, "next_cursor": page.next_cursor, "is_first_page": cursor is None}
    return render(request, "notices/announcement_list.html", context)


@login_required
def announcement_detail_page(request: HttpRequest, announcement_id: int) -> HttpResponse:
    """Opening the page marks the announcement read (the API needs the explicit POST)."""
    try:
        item = selectors.announcement_get(user=request.user, announcement_id=announcement_id)
    except NotFound as exc:
        raise Http404("Announcement not found.") from exc
    if not item.read:
        try:
            services.announcement_mark_read(user=request.user, announcement_id=announcement_id)
        except (NotFound, ReadStateUnavailable):
            pass  # it expired in between, or Redis is down: the page still shows it
    return render(request, "notices/announcement_detail.html", {"announcement": item.announcement})
