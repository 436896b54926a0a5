"""The admin of users, groups, API tokens and sign-in attempts (every write audited)."""

from typing import Any

from axes.admin import AccessAttemptAdmin, AccessFailureLogAdmin, AccessLogAdmin
from axes.models import AccessAttempt, AccessFailureLog, AccessLog
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from accounts.models import ApiToken, UserPlatform
from audit.trail import AuditedAdminMixin, audit_admin, object_type_of


class UserPlatformInline(admin.TabularInline):
    model = UserPlatform
    extra = 0
    min_num = 1
    verbose_name = "platform"


User = get_user_model()


admin.site.unregister(User)


@admin.register(User)
class PlatformUserAdmin(AuditedAdminMixin, UserAdmin):
    inlines = [UserPlatformInline]
    list_filter = (*UserAdmin.list_filter, "platform_memberships__platform")

    def get_inlines(self, request, obj):  # type: ignore[no-untyped-def]
        # New users get their default platform from a signal; edit it afterwards.
        return self.inlines if obj is not None else []

    def get_search_results(self, request, queryset, search_term):  # type: ignore[no-untyped-def]
        # The admin's autocomplete (recipients picked on the compose page) offers
        # only users who can sign in: a message to a deactivated account would be
        # delivered to nobody who reads it. The user list itself still finds them.
        queryset, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        if request.path.endswith("/autocomplete/"):
            queryset = queryset.filter(is_active=True)
        return queryset, may_have_duplicates

    def user_change_password(self, request: HttpRequest, id: str, form_url: str = "") -> HttpResponse:
        # Django saves the password and logs it without a transaction of its
        # own: the audit entry (password masked) must commit with the change.
        with transaction.atomic():
            return super().user_change_password(request, id, form_url)


admin.site.unregister(Group)


@admin.register(Group)
class AuditedGroupAdmin(AuditedAdminMixin, GroupAdmin):
    pass


@admin.register(ApiToken)
class ApiTokenAdmin(AuditedAdminMixin, admin.ModelAdmin):
    """Operators see who holds tokens and end them; a token is only ever
    issued to the user who signs in, and only its digest exists here."""

    list_display = ("id", "user", "created_at", "expires_at", "last_used_at")
    list_select_related = ("user",)
    search_fields = ("user__username",)
    fields = ("user", "created_at", "expires_at", "last_used_at")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class AuditedAccessAttemptAdmin(AuditedAdminMixin, AccessAttemptAdmin):
    # The clean-up deletes expired attempts whichever rows were picked: it is
    # recorded once, with its count, instead of once per picked row.
    audit_skip_actions = ("cleanup_expired_attempts",)

    @admin.action(description="Clean up expired attempts")
    def cleanup_expired_attempts(self, request: HttpRequest, queryset: QuerySet[AccessAttempt]) -> None:
        # axes reads the request's attempt time, which its middleware sets only
        # on a login: without it the library's action fails (a 500).
        if getattr(request, "axes_attempt_time", None) is None:
            request.axes_attempt_time = timezone.now()  # type: ignore[attr-defined]
        count = self.handler.clean_expired_user_attempts(request=request)
        audit_admin(
            request,
            action="cleanup_expired_attempts",
            object_type=object_type_of(AccessAttempt),
            changes={"count": count},
        )
        self.message_user(request, f"Cleaned up {count} expired access attempts.")


class AuditedAccessLogAdmin(AuditedAdminMixin, AccessLogAdmin):
    pass


class AuditedAccessFailureLogAdmin(AuditedAdminMixin, AccessFailureLogAdmin):
    pass


for _model, _admin_class in (
    (AccessAttempt, AuditedAccessAttemptAdmin),
    (AccessLog, AuditedAccessLogAdmin),
    (AccessFailureLog, AuditedAccessFailureLogAdmin),
):
    if admin.site.is_registered(_model):  # AXES_ENABLE_ADMIN
        admin.site.unregister(_model)
        admin.site.register(_model, _admin_class)
