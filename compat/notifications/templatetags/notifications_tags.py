"""The incumbent's template tags, under a strict Content-Security-Policy.

``register_notify_callbacks`` wrote an inline ``<script>`` of settings and
``register_notifier(...)`` calls, which a policy without 'unsafe-inline'
blocks. Here it writes a ``<script>`` that loads ``notifications/notify-config.js``
from the static files, with the settings in data attributes and the page's
CSP nonce (or the ``nonce`` given): no inline code for any policy to refuse.
The callbacks are named, as before, and looked up by name on ``window``
when data arrives, so a page may define them before or after the tag.
"""

import re
from typing import Any

from django import template
from django.templatetags.static import static
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from notifications import services
from notifications.selectors import notification_has_unread, notification_unread_count_cached

register = template.Library()

# A callback is a global function's name (dotted for one on an object): never code.
_CALLBACK = re.compile(r"^[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)*$")
_APIS = {"list": "notifications:live_unread_notification_list", "count": "notifications:live_unread_notification_count"}


def user_context(context: template.Context) -> Any:
    """The signed-in user of the page's request, else None."""
    if "user" not in context:
        return None
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return None
    return user


def _synced_user(context: template.Context) -> Any:
    """The user, with the inbox's marks pulled in once per request."""
    user = user_context(context)
    if user is None:
        return None
    request = context["request"]
    # Marked on the request (an attribute of our own, as middlewares add them).
    if not getattr(request, "notifications_synced", False):
        services.inbox_sync(user=user)
        request.notifications_synced = True
    return user


@register.simple_tag(takes_context=True)
def notifications_unread(context: template.Context) -> int | str:
    """The signed-in user's unread count (``{% notifications_unread as n %}``), '' without one."""
    user = _synced_user(context)
    if user is None:
        return ""
    return notification_unread_count_cached(user=user)


@register.filter
def has_notification(user: Any) -> bool:
    if not user or not getattr(user, "is_authenticated", False):
        return False
    services.inbox_sync(user=user)
    return notification_has_unread(user=user)


def _nonce(context: template.Context, given: str | None) -> str:
    """The nonce given to the tag, else the page's (django-csp's ``request.csp_nonce``)."""
    if given and "{" not in given:  # a template expression passed as a literal is no nonce
        return given
    request = context.get("request")
    nonce = getattr(request, "csp_nonce", None)
    return str(nonce) if nonce is not None else ""


@register.simple_tag(takes_context=True)
def register_notify_callbacks(
    context: template.Context,
    badge_class: str = "live_notify_badge",
    menu_class: str = "live_notify_list",
    refresh_period: int | str = 15,
    callbacks: str = "",
    api_name: str = "list",
    fetch: int | str = 5,
    nonce: str | None = None,
    mark_as_read: bool | str = False,
) -> SafeString | str:
    """Start polling the live endpoint every ``refresh_period`` seconds and hand
    each answer to the named ``callbacks`` (``fill_notification_badge``,
    ``fill_notification_list`` or the page's own). Needs notify.js on the page."""
    api = _APIS.get(api_name)
    if api is None:
        return ""
    names = [name.strip() for name in callbacks.split(",") if name.strip()]
    bad = [name for name in names if not _CALLBACK.match(name)]
    if bad:
        raise template.TemplateSyntaxError(f"register_notify_callbacks: {bad[0]!r} is not a function name.")
    nonce_value = _nonce(context, nonce)
    return format_html(
        '<script src="{}"{} data-badge-class="{}" data-menu-class="{}" data-api-url="{}" data-fetch="{}"'
        ' data-unread-url="{}" data-mark-all-url="{}" data-refresh-ms="{}" data-mark-as-read="{}"'
        ' data-callbacks="{}"></script>',
        static("notifications/notify-config.js"),
        format_html(' nonce="{}"', nonce_value) if nonce_value else "",
        badge_class,
        menu_class,
        reverse(api),
        int(fetch),
        reverse("notifications:unread"),
        reverse("notifications:mark_all_as_read"),
        int(refresh_period) * 1000,
        "true" if str(mark_as_read).lower() in ("true", "1") else "false",
        ",".join(names),
    )


@register.simple_tag(takes_context=True)
def live_notify_badge(context: template.Context, badge_class: str = "live_notify_badge") -> SafeString | str:
    user = _synced_user(context)
    if user is None:
        return ""
    return format_html("<span class='{}'>{}</span>", badge_class, notification_unread_count_cached(user=user))


@register.simple_tag
def live_notify_list(list_class: str = "live_notify_list") -> SafeString:
    return format_html("<ul class='{}'></ul>", list_class)
