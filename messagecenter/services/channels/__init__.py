"""Channels beyond the inbox: Web Push and e-mail when still unread, with the
user's choices per category, quiet hours and the hourly cap.

``plan`` stores what a send asks of the channels and starts it;
``recipients`` sorts an item's audience out against the read state;
``limits`` applies quiet hours and the cap; ``push`` fans pushes out and
retries them; ``email`` scans due items and mails; ``release`` sends what
quiet hours held; ``subscriptions`` keeps the users' devices.
"""

from messagecenter.services.channels.email import channel_token_user, channels_email_scan
from messagecenter.services.channels.plan import (
    ChannelRequest,
    channel_request,
    channels_plan,
    channels_release,
)
from messagecenter.services.channels.push import push_deliver, push_relay
from messagecenter.services.channels.release import channels_quiet_release
from messagecenter.services.channels.subscriptions import push_subscription_delete, push_subscription_save

__all__ = [
    "ChannelRequest",
    "channel_request",
    "channel_token_user",
    "channels_email_scan",
    "channels_plan",
    "channels_quiet_release",
    "channels_release",
    "push_deliver",
    "push_relay",
    "push_subscription_delete",
    "push_subscription_save",
]
