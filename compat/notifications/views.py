"""The incumbent's pages and live endpoints, under their old names.

Adapters: each syncs the user's notifications with the inbox
(``services.inbox_sync``), then reads or changes them. The marks answer GET
as the incumbent's did (its templates link to them); POST works too.
"""

from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.shortcuts import get_object_or_404, redirect
from django.utils.decorators import method_decorator
from django.utils.encoding import iri_to_uri
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods
from django.views.generic import ListView

from notifications import services
from notifications.helpers import get_notification_list
from notifications.models import Notification
from notifications.selectors import notification_page_list, notification_unread_count
from notifications.settings import get_config, soft_delete
from notifications.utils import slug2id

_MARK_METHODS = ["GET", "POST"]


class NotificationViewList(ListView):
    template_name = "notifications/list.html"
    context_object_name = "notifications"
    unread_only = False

    def get_paginate_by(self, queryset: Any) -> int:
        return int(get_config()["PAGINATE_BY"])

    @method_decorator(login_required)
    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        return super().dispatch(request, *args, **kwargs)

    def get_queryset(self) -> Any:
        services.inbox_sync(user=self.request.user)
        return notification_page_list(user=self.request.user, unread_only=self.unread_only)


class AllNotificationsList(NotificationViewList):
    """Every notification of the signed-in user (the active ones with SOFT_DELETE)."""


class UnreadNotificationsList(NotificationViewList):
    unread_only = True


def _redirect_next(request: HttpRequest, default: str) -> HttpResponse:
    """To ``?next=`` when it is a path of this site or names one of
    ALLOWED_HOSTS (exact names; a wildcard entry allows no absolute URL),
    else to ``default``."""
    wanted = request.GET.get("next")
    if wanted and url_has_allowed_host_and_scheme(
        wanted, allowed_hosts=set(settings.ALLOWED_HOSTS), require_https=request.is_secure()
    ):
        return redirect(iri_to_uri(wanted))
    return redirect(default)


def _own(request: HttpRequest, slug: str) -> Notification:
    return get_object_or_404(Notification, recipient=request.user, id=slug2id(slug))


@login_required
@require_http_methods(_MARK_METHODS)
def mark_all_as_read(request: HttpRequest) -> HttpResponse:
    services.inbox_sync(user=request.user)
    Notification.objects.filter(recipient_id=request.user.pk).mark_all_as_read()
    return _redirect_next(request, "notifications:unread")


@login_required
@require_http_methods(_MARK_METHODS)
def mark_as_read(request: HttpRequest, slug: str) -> HttpResponse:
    _own(request, slug).mark_as_read()
    return _redirect_next(request, "notifications:unread")


@login_required
@require_http_methods(_MARK_METHODS)
def mark_as_unread(request: HttpRequest, slug: str) -> HttpResponse:
    _own(request, slug).mark_as_unread()
    return _redirect_next(request, "notifications:unread")


@login_required
@require_http_methods(_MARK_METHODS)
def delete(request: HttpRequest, slug: str) -> HttpResponse:
    notification = _own(request, slug)
    if soft_delete():
        notification.deleted = True
        notification.save()
    else:
        notification.delete()
    return _redirect_next(request, "notifications:all")


@never_cache
def live_unread_notification_count(request: HttpRequest) -> JsonResponse:
    if not request.user.is_authenticated:
        return JsonResponse({"unread_count": 0})
    services.inbox_sync(user=request.user)
    return JsonResponse({"unread_count": notification_unread_count(user=request.user)})


@never_cache
def live_unread_notification_list(request: HttpRequest) -> JsonResponse:
    if not request.user.is_authenticated:
        return JsonResponse({"unread_count": 0, "unread_list": []})
    services.inbox_sync(user=request.user)
    # Listed first: with ?mark_as_read= the count is taken after the marks.
    unread_list = get_notification_list(request, "unread")
    return JsonResponse({"unread_count": notification_unread_count(user=request.user), "unread_list": unread_list})


@never_cache
def live_all_notification_list(request: HttpRequest) -> JsonResponse:
    if not request.user.is_authenticated:
        return JsonResponse({"all_count": 0, "all_list": []})
    services.inbox_sync(user=request.user)
    all_list = get_notification_list(request)
    return JsonResponse({"all_count": request.user.notifications.count(), "all_list": all_list})


@never_cache
def live_all_notification_count(request: HttpRequest) -> JsonResponse:
    if not request.user.is_authenticated:
        return JsonResponse({"all_count": 0})
    services.inbox_sync(user=request.user)
    return JsonResponse({"all_count": request.user.notifications.count()})
