"""The incumbent's admin base class, for admins of a notification model."""

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest


class AbstractNotificationAdmin(admin.ModelAdmin):
    raw_id_fields = ("recipient",)
    list_display = ("recipient", "actor", "level", "target", "unread", "public")
    list_filter = ("level", "unread", "public", "timestamp")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        # One query per content type, not one per row: the actor column, and
        # each row's checkbox label (Django 5 names the row with str(), which
        # names the action object and the target too).
        return super().get_queryset(request).prefetch_related("actor", "action_object", "target")
