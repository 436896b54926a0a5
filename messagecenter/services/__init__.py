"""Write use cases of the message centre (``<entity>_<verb>``, keyword-only)."""

from messagecenter.services.bulletins import bulletin_create, bulletin_delete, bulletin_update
from messagecenter.services.channels import (
    ChannelRequest,
    channel_request,
    channel_token_user,
    channels_email_scan,
    channels_quiet_release,
    push_deliver,
    push_relay,
    push_subscription_delete,
    push_subscription_save,
)
from messagecenter.services.delivery import delivery_due_now
from messagecenter.services.groups import (
    user_group_add_members,
    user_group_create,
    user_group_delete,
    user_group_remove_members,
)
from messagecenter.services.idempotency import message_send_keys_purge, message_send_once, request_fingerprint
from messagecenter.services.inbox import (
    inbox_deliver,
    inbox_first_reads_fold,
    inbox_hide,
    inbox_mark_all_read,
    inbox_mark_read,
    inbox_mark_seen,
    inbox_mark_unread,
    inbox_publish_pull,
    inbox_removed_trim,
)
from messagecenter.services.inbox_actions import inbox_archive, inbox_bulk, inbox_snooze, inbox_unarchive
from messagecenter.services.messages import (
    message_audience_preview,
    message_cleanup_expired,
    message_deliver,
    message_fanout_chunk,
    message_retract,
    message_send,
)
from messagecenter.services.notifications import (
    message_type_create,
    notification_deliver,
    notification_details_free,
    notification_fanout_chunk,
    notification_rebuild,
    notification_send,
    notification_sweep,
    notification_withdraw,
    subscription_create,
    subscription_delete,
)
from messagecenter.services.preferences import (
    channel_unsubscribe,
    preferences_update,
    subscription_self_create,
    subscription_self_delete,
)
from messagecenter.services.reminders import item_remind
from messagecenter.services.responses import actions_validate, message_respond
from messagecenter.services.retention import retention_purge
from messagecenter.services.rules import rule_run, rule_validate, rules_run, rules_run_due
from messagecenter.services.scheduled import (
    message_schedule_update,
    notification_cancel_or_withdraw,
    notification_schedule,
    notification_schedule_update,
    scheduled_send_due,
)
from messagecenter.services.slots import slot_allocate

__all__ = [
    "ChannelRequest",
    "actions_validate",
    "bulletin_create",
    "bulletin_delete",
    "bulletin_update",
    "channel_request",
    "channel_token_user",
    "channel_unsubscribe",
    "channels_email_scan",
    "channels_quiet_release",
    "delivery_due_now",
    "inbox_archive",
    "inbox_bulk",
    "inbox_deliver",
    "inbox_first_reads_fold",
    "inbox_hide",
    "inbox_mark_all_read",
    "inbox_mark_read",
    "inbox_mark_seen",
    "inbox_mark_unread",
    "inbox_publish_pull",
    "inbox_removed_trim",
    "inbox_snooze",
    "inbox_unarchive",
    "item_remind",
    "message_audience_preview",
    "message_cleanup_expired",
    "message_deliver",
    "message_fanout_chunk",
    "message_respond",
    "message_retract",
    "message_schedule_update",
    "message_send",
    "message_send_keys_purge",
    "message_send_once",
    "message_type_create",
    "notification_cancel_or_withdraw",
    "notification_deliver",
    "notification_details_free",
    "notification_fanout_chunk",
    "notification_rebuild",
    "notification_schedule",
    "notification_schedule_update",
    "notification_send",
    "notification_sweep",
    "notification_withdraw",
    "preferences_update",
    "push_deliver",
    "push_relay",
    "push_subscription_delete",
    "push_subscription_save",
    "request_fingerprint",
    "retention_purge",
    "rule_run",
    "rule_validate",
    "rules_run",
    "rules_run_due",
    "scheduled_send_due",
    "slot_allocate",
    "subscription_create",
    "subscription_delete",
    "subscription_self_create",
    "subscription_self_delete",
    "user_group_add_members",
    "user_group_create",
    "user_group_delete",
    "user_group_remove_members",
]
