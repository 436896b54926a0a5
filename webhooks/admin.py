"""Webhook endpoints and deliveries in the admin."""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from django.http import HttpRequest

from audit.trail import AuditedAdminMixin
from core.api.errors import ValidationFailed
from webhooks import services as webhooks
from webhooks.models import WebhookDelivery, WebhookEndpoint


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
        return bool(request.user.has_perm("webhooks.change_webhookdelivery"))

    @admin.action(description="Retry the selected deliveries now", permissions=["retry"])
    def retry(self, request: HttpRequest, queryset: QuerySet[WebhookDelivery]) -> None:
        count = webhooks.webhook_retry(ids=list(queryset.values_list("pk", flat=True)))
        self.message_user(request, f"{count} deliveries queued again.")
