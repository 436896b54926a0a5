from typing import Any

from axes.admin import AccessAttemptAdmin, AccessFailureLogAdmin, AccessLogAdmin
from axes.models import AccessAttempt, AccessFailureLog, AccessLog
from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from kombu.exceptions import OperationalError as KombuOperationalError

from core import webhooks
from core.audit import AuditedAdminMixin, audit_admin, audit_csv, object_type_of
from core.exceptions import ValidationFailed
from core.models import ApiToken, AuditEntry, RedisCheckRun, UserPlatform, WebhookDelivery, WebhookEndpoint
from core.tasks import check_redis_task


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


# --- the libraries' admins, audited like ours ---------------------------------------
# Groups carry permissions, tokens sign API calls, and deleting login attempts
# unlocks an account: each is an operator write the log must show.

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


# --- Redis read model checks (check_redis) ------------------------------------------

RUN_PERMISSION = "core.add_redischeckrun"


@admin.register(RedisCheckRun)
class RedisCheckRunAdmin(AuditedAdminMixin, admin.ModelAdmin):
    """Runs are records: read-only. "Run check now" (POST, CSRF) needs the model's
    ``add`` permission, which holding it never turns into an add form here; queuing
    it is audited (a repair rewrites the read model)."""

    change_list_template = "admin/core/redischeckrun/change_list.html"
    list_display = ("started_at", "repair", "drift_count", "repaired_count", "error_summary")
    list_filter = ("repair",)
    date_hierarchy = "started_at"
    fields = ("started_at", "finished_at", "repair", "drift_count", "repaired_count", "error", "findings_table")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: RedisCheckRun | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: RedisCheckRun | None = None) -> bool:
        return False

    @admin.display(description="error")
    def error_summary(self, obj: RedisCheckRun) -> str:
        return obj.error[:80]

    @admin.display(description="findings")
    def findings_table(self, obj: RedisCheckRun) -> str:
        if not obj.findings:
            return "none"
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td><code>{}</code></td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
            (
                (
                    f.get("area", ""),
                    f.get("key", ""),
                    f.get("member", ""),
                    f.get("detail", ""),
                    "repaired" if f.get("repaired") else "",
                )
                for f in obj.findings
            ),
        )
        shown = len(obj.findings)
        note = f"first {shown} of {obj.drift_count}" if obj.drift_count > shown else f"{shown}"
        return format_html(
            '<p>{} finding(s)</p><table class="redis-check-findings"><thead><tr><th>area</th><th>key</th>'
            "<th>member</th><th>detail</th><th>status</th></tr></thead><tbody>{}</tbody></table>",
            note,
            rows,
        )

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.run_view)
        return [path("run/", view, name="core_redischeckrun_run"), *super().get_urls()]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        context = {"can_run_check": request.user.has_perm(RUN_PERMISSION), **(extra_context or {})}
        return super().changelist_view(request, extra_context=context)

    def run_view(self, request: HttpRequest) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not request.user.has_perm(RUN_PERMISSION):
            raise PermissionDenied
        repair = request.POST.get("repair") == "1"
        try:
            # The entry commits only if the check was queued: a broker that
            # refuses it rolls the entry back with the error shown.
            with transaction.atomic():
                run_type = object_type_of(RedisCheckRun)
                audit_admin(request, action="check_redis", object_type=run_type, changes={"repair": repair})
                check_redis_task.delay(repair=repair)
        except KombuOperationalError as exc:
            self.message_user(request, f"Could not queue the check: {exc}", messages.ERROR)
        else:
            what = "Check with repair" if repair else "Check"
            self.message_user(request, f"{what} queued: its run appears in this list when it ends.", messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:core_redischeckrun_changelist"))


# --- the audit log ---------------------------------------------------------------------


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    """The audit log is a record: viewable and exportable, never edited here."""

    list_display = ("at", "actor_name", "action", "object_type", "object_id", "object_repr", "source", "ip")
    list_filter = ("action", "object_type", "source", "at")
    search_fields = ("actor_name", "object_id", "object_repr")
    date_hierarchy = "at"
    fields = (
        "at",
        "actor",
        "actor_name",
        "action",
        "object_type",
        "object_id",
        "object_repr",
        "changes",
        "source",
        "path",
        "ip",
    )
    readonly_fields = fields
    actions = ("export_csv",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: AuditEntry | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: AuditEntry | None = None) -> bool:
        return False

    @admin.action(description="Export selected entries as CSV", permissions=["view"])
    def export_csv(self, request: HttpRequest, queryset: QuerySet[AuditEntry]) -> HttpResponse:
        response = HttpResponse(audit_csv(queryset.order_by("-at", "-id")), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = 'attachment; filename="audit.csv"'
        return response


class WebhookEndpointForm(forms.ModelForm):
    url = forms.URLField(max_length=500, assume_scheme="https")
    events = forms.MultipleChoiceField(
        choices=[(event, event) for event in webhooks.EVENTS], widget=forms.CheckboxSelectMultiple
    )

    class Meta:
        model = WebhookEndpoint
        fields = ("url", "description", "events", "active")

    def clean_url(self) -> str:
        url = str(self.cleaned_data["url"])
        try:
            webhooks.webhook_url_check(url)
        except ValidationFailed as exc:
            raise DjangoValidationError(exc.message) from exc
        return url


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(AuditedAdminMixin, admin.ModelAdmin):
    form = WebhookEndpointForm
    list_display = ("url", "events", "active", "consecutive_failures", "disabled_at", "created_at")
    list_filter = ("active",)
    readonly_fields = ("consecutive_failures", "disabled_at", "created_at")

    def save_model(self, request: HttpRequest, obj: WebhookEndpoint, form: Any, change: bool) -> None:
        if not change:
            obj.secret = webhooks.webhook_secret_new()
        elif "active" in form.changed_data and obj.active:
            obj.consecutive_failures = 0  # turned on again: its past failures are forgiven
            obj.disabled_at = None
        super().save_model(request, obj, form, change)
        if not change:
            # Shown once: the admin never displays the secret again.
            messages.warning(request, f"Signing secret (shown only now): {obj.secret}")


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(AuditedAdminMixin, admin.ModelAdmin):
    """The delivery log: read-only, with a retry for failed deliveries (audited per
    delivery, as is deleting rows of the log)."""

    list_display = ("event", "endpoint", "status", "attempts", "last_status_code", "created_at", "next_attempt_at")
    list_filter = ("status", "event", "endpoint")
    search_fields = ("message_id", "endpoint__url")
    readonly_fields = [f.name for f in WebhookDelivery._meta.fields]
    actions = ["retry"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("core.change_webhookdelivery"))

    @admin.action(description="Retry the selected deliveries now", permissions=["retry"])
    def retry(self, request: HttpRequest, queryset: QuerySet[WebhookDelivery]) -> None:
        count = webhooks.webhook_retry(ids=list(queryset.values_list("pk", flat=True)))
        self.message_user(request, f"{count} deliveries queued again.")
