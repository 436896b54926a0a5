from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin

from core.models import UserPlatform


class UserPlatformInline(admin.TabularInline):
    model = UserPlatform
    extra = 0
    min_num = 1
    verbose_name = "platform"


User = get_user_model()
admin.site.unregister(User)


@admin.register(User)
class PlatformUserAdmin(UserAdmin):
    inlines = [UserPlatformInline]
    list_filter = (*UserAdmin.list_filter, "platform_memberships__platform")

    def get_inlines(self, request, obj):  # type: ignore[no-untyped-def]
        # New users get their default platform from a signal; edit it afterwards.
        return self.inlines if obj is not None else []
