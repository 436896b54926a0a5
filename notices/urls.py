from django.urls import URLPattern, path

from core.urls import malformed_id_path
from notices import apis, views

api_urlpatterns: list[URLPattern] = [
    path("announcements/", apis.AnnouncementListApi.as_view(), name="announcement-list"),
    path("announcements/counts/", apis.AnnouncementCountsApi.as_view(), name="announcement-counts"),
    path("announcements/<id:announcement_id>/", apis.AnnouncementDetailApi.as_view(), name="announcement-detail"),
    path("announcements/<id:announcement_id>/read/", apis.AnnouncementMarkReadApi.as_view(), name="announcement-read"),
    path(
        "announcements/<id:announcement_id>/unread/",
        apis.AnnouncementMarkUnreadApi.as_view(),
        name="announcement-unread",
    ),
    path("manage/announcements/", apis.AnnouncementCreateApi.as_view(), name="manage-announcement-create"),
    path(
        "manage/announcements/<id:announcement_id>/",
        apis.AnnouncementManageApi.as_view(),
        name="manage-announcement",
    ),
    path(
        "manage/announcements/<id:announcement_id>/stats/",
        apis.AnnouncementStatsApi.as_view(),
        name="manage-announcement-stats",
    ),
    # A path segment that is not an id: 400 (the routes above match only ids).
    malformed_id_path("manage/announcements/"),
    malformed_id_path("manage/announcements/", "stats/"),
    *(malformed_id_path("announcements/", suffix, operators_only=False) for suffix in ("", "read/", "unread/")),
]

page_urlpatterns: list[URLPattern] = [
    path("announcements/", views.announcement_list_page, name="list"),
    path("announcements/<id:announcement_id>/", views.announcement_detail_page, name="detail"),
]
