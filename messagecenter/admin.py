"""Django admin for operators. Writes go through the services; the admin only
adapts forms to them."""

from typing import Any

from django.contrib import admin, messages
from django.db.models import Count, QuerySet
from django.forms import ModelForm
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from core.exceptions import ApplicationError
from messagecenter import selectors, services
from messagecenter.forms import BulletinForm, MessageComposeForm, UserGroupForm
from messagecenter.models import Bulletin, Message, UserGroup, UserGroupMembership


class MembershipInline(admin.TabularInline):
    """Read-only list of members; changes go through the add/remove fields."""

    model = UserGroupMembership
    fields = ["user", "created_at"]
    readonly_fields = ["user", "created_at"]
    extra = 0
    can_delete = False
    max_num = 0
    show_change_link = False


@admin.register(UserGroup)
class UserGroupAdmin(admin.ModelAdmin):
    form = UserGroupForm
    list_display = ["name", "member_count", "created_at"]
    search_fields = ["name"]
    inlines = [MembershipInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[UserGroup]:
        return super().get_queryset(request).annotate(n_members=Count("memberships"))

    @admin.display(description="Members", ordering="n_members")
    def member_count(self, obj: UserGroup) -> int:
        return int(getattr(obj, "n_members", 0))

    def save_model(self, request: HttpRequest, obj: UserGroup, form: ModelForm, change: bool) -> None:
        if change:
            obj.save()
        else:
            created = services.user_group_create(name=obj.name)
            obj.pk = created.pk
            obj.created_at = created.created_at

    def save_related(self, request: HttpRequest, form: ModelForm, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)  # read-only inline: saves nothing
        group = form.instance
        added = services.user_group_add_members(group=group, user_ids=form.cleaned_data.get("add_members") or [])
        removed = services.user_group_remove_members(
            group=group, user_ids=form.cleaned_data.get("remove_members") or []
        )
        if added or removed:
            self.message_user(request, f"{added} member(s) added, {removed} removed.")

    def delete_model(self, request: HttpRequest, obj: UserGroup) -> None:
        services.user_group_delete(group=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[UserGroup]) -> None:
        for group in queryset:
            services.user_group_delete(group=group)


@admin.register(Bulletin)
class BulletinAdmin(admin.ModelAdmin):
    form = BulletinForm
    list_display = ["title", "display_time", "expire_at", "audience"]
    list_filter = ["groups"]
    search_fields = ["title"]
    date_hierarchy = "display_time"

    @admin.display(description="Shown to")
    def audience(self, obj: Bulletin) -> str:
        names = [g.name for g in obj.groups.all()]
        return ", ".join(names) if names else "everyone"

    def save_model(self, request: HttpRequest, obj: Bulletin, form: ModelForm, change: bool) -> None:
        data = form.cleaned_data
        group_ids = [g.pk for g in data.get("groups") or []]
        if change:
            stored = Bulletin.objects.get(pk=obj.pk)
            fields = {k: data[k] for k in ("title", "body_html", "display_time", "expire_at")}
            services.bulletin_update(bulletin=stored, data={**fields, "group_ids": group_ids}, actor=request.user)  # type: ignore[arg-type]
        else:
            created = services.bulletin_create(
                title=data["title"],
                body_html=data["body_html"],
                display_time=data["display_time"],
                expire_at=data.get("expire_at"),
                group_ids=group_ids,
                actor=request.user,  # type: ignore[arg-type]
            )
            obj.pk = created.pk

    def save_related(self, request: HttpRequest, form: ModelForm, formsets: Any, change: bool) -> None:
        for formset in formsets:
            self.save_formset(request, form, formset, change=change)
        # groups were set by the service: no form.save_m2m()

    def delete_model(self, request: HttpRequest, obj: Bulletin) -> None:
        services.bulletin_delete(bulletin=obj, actor=request.user)  # type: ignore[arg-type]

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Bulletin]) -> None:
        for bulletin in queryset:
            services.bulletin_delete(bulletin=bulletin, actor=request.user)  # type: ignore[arg-type]


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):
    list_display = ["title", "category", "delivery", "status", "audience_size", "progress", "created_at"]
    list_filter = ["status", "delivery", "category"]
    search_fields = ["title"]
    actions = ["retract"]
    readonly_fields = [
        "category",
        "title",
        "summary",
        "body_preview",
        "link",
        "images",
        "sender",
        "created_at",
        "expire_at",
        "everyone",
        "groups",
        "audience_size",
        "delivery",
        "status",
        "progress",
        "retracted_at",
    ]
    fields = tuple(readonly_fields)

    @admin.display(description="Body")
    def body_preview(self, obj: Message) -> str:
        return format_html("<div>{}</div>", obj.body_html[:2000])

    @admin.display(description="Fan-out progress")
    def progress(self, obj: Message) -> str:
        if obj.delivery == "pull":
            return "stored once, merged on read"
        done, total = selectors.message_progress(message=obj)
        percent = 100 if total == 0 else round(100 * done / total)
        return f"{done} / {total} ({percent}%)"

    @admin.action(description="Retract from every inbox", permissions=["delete"])
    def retract(self, request: HttpRequest, queryset: QuerySet[Message]) -> None:
        count = sum(services.message_retract(message=m, actor=request.user) for m in queryset)  # type: ignore[arg-type]
        self.message_user(request, f"{count} message(s) retracted.")

    def delete_model(self, request: HttpRequest, obj: Message) -> None:
        services.message_retract(message=obj, actor=request.user)  # type: ignore[arg-type]
        obj.delete()

    def add_view(
        self, request: HttpRequest, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """Compose and send: "Preview audience" shows the size and delivery mode first."""
        if not self.has_add_permission(request):
            from django.core.exceptions import PermissionDenied

            raise PermissionDenied
        form = MessageComposeForm(request.POST or None, request.FILES or None)
        preview: dict[str, Any] | None = None
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            audience = {
                "user_ids": data["users"],
                "group_ids": [g.pk for g in data["groups"]],
                "everyone": data["everyone"],
            }
            try:
                if "_send" not in request.POST:
                    size = services.message_audience_preview(**audience)
                    from django.conf import settings

                    pull = size is None or size > int(settings.MESSAGECENTER_PUSH_THRESHOLD)
                    preview = {"size": size, "delivery": "pull" if pull else "push"}
                else:
                    message = services.message_send(
                        sender=request.user,  # type: ignore[arg-type]
                        category=data["category"],
                        title=data["title"],
                        summary=data["summary"],
                        body_html=data["body_html"],
                        link=data["link"],
                        images=data["image_urls"],
                        image_files=data["image_files"],
                        expire_at=data["expire_at"],
                        **audience,
                    )
                    recipients = "everyone" if message.audience_size is None else f"{message.audience_size} user(s)"
                    self.message_user(request, f"Sent by {message.delivery} to {recipients}.", messages.SUCCESS)
                    return HttpResponseRedirect(reverse("admin:messagecenter_message_change", args=[message.pk]))
            except ApplicationError as exc:
                form.add_error(None, exc.message)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Compose message",
            "form": form,
            "preview": preview,
            **(extra_context or {}),
        }
        return TemplateResponse(request, "admin/messagecenter/message/compose.html", context)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Message]:
        return super().get_queryset(request).select_related("sender")
