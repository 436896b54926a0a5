from django.urls import URLPattern, path

from core.urls import malformed_id_path
from messagecenter import live_api, views
from messagecenter.apis import channels, inbox, manage, me, responses, subscriptions, unread

api_urlpatterns: list[URLPattern] = [
    path("inbox/", inbox.InboxListApi.as_view(), name="mc-inbox"),
    path("inbox/counts/", live_api.InboxCountsLiveApi.as_view(), name="mc-inbox-counts"),
    path("inbox/stream/", live_api.InboxStreamApi.as_view(), name="mc-inbox-stream"),
    path("inbox/read-all/", inbox.InboxReadAllApi.as_view(), name="mc-inbox-read-all"),
    path("inbox/seen/", inbox.InboxSeenApi.as_view(), name="mc-inbox-seen"),
    path("inbox/bulk/", inbox.InboxBulkApi.as_view(), name="mc-inbox-bulk"),
    path("inbox/<str:item_id>/", inbox.InboxItemApi.as_view(), name="mc-inbox-item"),
    path("inbox/<str:item_id>/read/", inbox.InboxItemReadApi.as_view(), name="mc-inbox-item-read"),
    path("inbox/<str:item_id>/unread/", inbox.InboxItemUnreadApi.as_view(), name="mc-inbox-item-unread"),
    path("inbox/<str:item_id>/archive/", inbox.InboxItemArchiveApi.as_view(), name="mc-inbox-item-archive"),
    path("inbox/<str:item_id>/unarchive/", inbox.InboxItemUnarchiveApi.as_view(), name="mc-inbox-item-unarchive"),
    path("inbox/<str:item_id>/snooze/", inbox.InboxItemSnoozeApi.as_view(), name="mc-inbox-item-snooze"),
    path("inbox/<str:item_id>/respond/", inbox.InboxItemRespondApi.as_view(), name="mc-inbox-item-respond"),
    path("manage/user-groups/", manage.UserGroupCreateApi.as_view(), name="mc-user-groups"),
    path("manage/user-groups/<id:group_id>/", manage.UserGroupDetailApi.as_view(), name="mc-user-group"),
    path("manage/user-groups/<id:group_id>/members/", manage.UserGroupMembersApi.as_view(), name="mc-group-members"),
    path("manage/bulletins/", manage.BulletinCreateApi.as_view(), name="mc-bulletins"),
    path("manage/bulletins/<id:bulletin_id>/", manage.BulletinDetailApi.as_view(), name="mc-bulletin"),
    path("manage/messages/", manage.MessageSendApi.as_view(), name="mc-messages"),
    path("manage/messages/<id:message_id>/", manage.MessageRetractApi.as_view(), name="mc-message"),
    path(
        "manage/messages/<id:message_id>/responses/",
        responses.MessageResponsesApi.as_view(),
        name="mc-message-responses",
    ),
    # Who has not read a message or bulletin, and the reminder to them.
    *(
        path(f"manage/{kind}s/<id:item_id>/{action}/", view.as_view(), name=f"mc-{kind}-{action}")
        for kind, action, view in (
            ("message", "unread-recipients", unread.MessageUnreadApi),
            ("message", "remind", unread.MessageRemindApi),
            ("bulletin", "unread-recipients", unread.BulletinUnreadApi),
            ("bulletin", "remind", unread.BulletinRemindApi),
        )
    ),
    path("manage/message-types/", subscriptions.MessageTypeCreateApi.as_view(), name="mc-message-types"),
    path(
        "manage/message-types/<id:message_type_id>/",
        subscriptions.MessageTypeDetailApi.as_view(),
        name="mc-message-type",
    ),
    path("manage/subscriptions/", subscriptions.SubscriptionCreateApi.as_view(), name="mc-subscriptions"),
    path(
        "manage/subscriptions/<id:subscription_id>/",
        subscriptions.SubscriptionDeleteApi.as_view(),
        name="mc-subscription",
    ),
    path("manage/notifications/", subscriptions.NotificationSendApi.as_view(), name="mc-notifications"),
    path(
        "manage/notifications/<id:notification_id>/",
        subscriptions.NotificationDetailApi.as_view(),
        name="mc-notification",
    ),
    # A path segment that is not an id: 400 (the routes above match only ids).
    *(
        malformed_id_path(f"manage/{name}/")
        for name in ("user-groups", "bulletins", "messages", "message-types", "subscriptions", "notifications")
    ),
    malformed_id_path("manage/user-groups/", "members/"),
    *(
        malformed_id_path(f"manage/{name}/", f"{action}/")
        for name in ("bulletins", "messages")
        for action in ("unread-recipients", "remind")
    ),
    malformed_id_path("manage/messages/", "responses/"),
    path("me/preferences/", me.PreferencesApi.as_view(), name="mc-me-preferences"),
    path("me/subscriptions/", me.MySubscriptionsApi.as_view(), name="mc-me-subscriptions"),
    path("me/subscriptions/<id:subscription_id>/", me.MySubscriptionApi.as_view(), name="mc-me-subscription"),
    malformed_id_path("me/subscriptions/", operators_only=False),
    path("push/public-key/", channels.PushPublicKeyApi.as_view(), name="mc-push-public-key"),
    path("me/push-subscriptions/", channels.PushSubscriptionsApi.as_view(), name="mc-me-push-subscriptions"),
    path(
        "me/push-subscriptions/<id:subscription_id>/",
        channels.PushSubscriptionApi.as_view(),
        name="mc-me-push-subscription",
    ),
    malformed_id_path("me/push-subscriptions/", operators_only=False),
]

page_urlpatterns: list[URLPattern] = [
    path("inbox/", views.inbox_page, name="inbox"),
    path("inbox/read-all/", views.inbox_read_all, name="read-all"),
    path("inbox/settings/", views.settings_page, name="settings"),
    path("email/unsubscribe/<str:token>/", views.digest_unsubscribe, name="digest-unsubscribe"),
    path("email/unsubscribe/channel/<str:token>/", views.channel_unsubscribe, name="channel-unsubscribe"),
    path("inbox/<str:item_id>/", views.inbox_item_page, name="item"),
    path("inbox/<str:item_id>/hide/", views.inbox_hide, name="hide"),
    path("inbox/<str:item_id>/respond/", views.inbox_respond, name="respond"),
]
