"""The incumbent's URLs and names; include them with the ``notifications``
namespace: ``path("inbox/notifications/", include("notifications.urls", namespace="notifications"))``."""

from django.urls import path, re_path

from notifications import views

app_name = "notifications"

urlpatterns = [
    path("", views.AllNotificationsList.as_view(), name="all"),
    path("unread/", views.UnreadNotificationsList.as_view(), name="unread"),
    path("mark-all-as-read/", views.mark_all_as_read, name="mark_all_as_read"),
    re_path(r"^mark-as-read/(?P<slug>\d+)/$", views.mark_as_read, name="mark_as_read"),
    re_path(r"^mark-as-unread/(?P<slug>\d+)/$", views.mark_as_unread, name="mark_as_unread"),
    re_path(r"^delete/(?P<slug>\d+)/$", views.delete, name="delete"),
    path("api/unread_count/", views.live_unread_notification_count, name="live_unread_notification_count"),
    path("api/all_count/", views.live_all_notification_count, name="live_all_notification_count"),
    path("api/unread_list/", views.live_unread_notification_list, name="live_unread_notification_list"),
    # No trailing $ in the incumbent's pattern: longer paths answered too.
    re_path(r"^api/all_list/", views.live_all_notification_list, name="live_all_notification_list"),
]
