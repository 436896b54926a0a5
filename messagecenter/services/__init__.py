"""Write use cases of the message centre (``<entity>_<verb>``, keyword-only)."""

from messagecenter.services.bulletins import bulletin_create, bulletin_delete, bulletin_update
from messagecenter.services.groups import (
    user_group_add_members,
    user_group_create,
    user_group_delete,
    user_group_remove_members,
)
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
    notification_fanout_chunk,
    notification_rebuild,
    notification_send,
    notification_sweep,
    notification_withdraw,
    subscription_create,
    subscription_delete,
)
from messagecenter.services.rules import rule_run, rule_validate, rules_run, rules_run_due
from messagecenter.services.slots import slot_allocate

__all__ = [
    "bulletin_create",
    "bulletin_delete",
    "bulletin_update",
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
    "message_audience_preview",
    "message_cleanup_expired",
    "message_deliver",
    "message_fanout_chunk",
    "message_retract",
    "message_send",
    "message_type_create",
    "notification_deliver",
    "notification_fanout_chunk",
    "notification_rebuild",
    "notification_send",
    "notification_sweep",
    "notification_withdraw",
    "rule_run",
    "rule_validate",
    "rules_run",
    "rules_run_due",
    "slot_allocate",
    "subscription_create",
    "subscription_delete",
    "user_group_add_members",
    "user_group_create",
    "user_group_delete",
    "user_group_remove_members",
]
