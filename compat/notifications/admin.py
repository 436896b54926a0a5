"""Notifications in the Django admin, as the incumbent showed them."""

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from audit.trail import AuditedAdminMixin
from notifications.base.admin import AbstractNotificationAdmin
from notifications.models import Notification


@admin.action(description=_("Mark selected notifications as unread"))
def mark_unread(_modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Notification]) -> None:
    # Through the queryset's method: the recipients' inboxes hear of it.
    queryset.mark_all_as_unread()  # type: ignore[attr-defined]


@admin.register(Notification)
class NotificationAdmin(AuditedAdminMixin, AbstractNotificationAdmin):
    """The incumbent's admin; its writes (the action included) reach the audit log."""

    readonly_fields = ("action_object_url", "actor_object_url", "target_object_url")
    actions = [mark_unread]
