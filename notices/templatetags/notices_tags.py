"""``{% load notices_tags %}``: the pinned-announcement banner and safe body rendering."""

from typing import Any

from django import template
from django.db import DatabaseError
from django.utils.safestring import SafeString, mark_safe

from core.html import sanitize_html
from core.replicas import is_database_outage
from notices.selectors import announcement_pinned_unread

register = template.Library()


@register.inclusion_tag("notices/banner.html", takes_context=True)
def announcement_banner(context: template.Context) -> dict[str, Any]:
    """Unread pinned live announcements of the request's user (nothing for anonymous users)."""
    request = context.get("request")
    user = getattr(request, "user", None) or context.get("user")
    if user is None or not user.is_authenticated:
        return {"announcements": []}
    try:
        return {"announcements": announcement_pinned_unread(user=user)}
    except DatabaseError as exc:
        if not is_database_outage(exc):
            raise
        # The banner is an extra: with PostgreSQL down the page it sits on
        # (served from Redis) still renders, without it.
        return {"announcements": []}


@register.filter
def sanitized(value: str) -> SafeString:
    """Render stored rich HTML: sanitised again on the way out, so no template needs ``|safe``."""
    return mark_safe(sanitize_html(value))  # noqa: S308  (nh3 output: scripts, handlers, unsafe URLs removed)
