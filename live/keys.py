"""Redis key names of the live updates (the transport, live/transport.py): versions,
channels and the due-queue of broadcasts, built on ``core.keys``."""

from collections.abc import Iterable

from core.keys import GLOBAL_TAG, USER_ID_FILL, key, user_tag

# --- live updates -------------------------------------------------------------------
# (owned by live/transport.py, the transport)
#
# Every change to what a user's inbox or announcement counts show bumps the
# user's version and publishes a small event on the user's channel; the SSE
# stream listens to the channel, and the read cache's tag takes the version in.


def user_version(user_id: int) -> str:
    """string: counter bumped on every change to the user's inbox (part of the read cache's tag)."""
    return key("live", "version", user_tag(user_id))


def user_channel(user_id: int) -> str:
    """pub/sub channel: JSON events ``{"v": version, "reason": str}`` for the user's open pages."""
    return key("live", "channel", user_tag(user_id))


def user_channels(user_ids: Iterable[int]) -> list[str]:
    """``user_channel`` of many users at once (a fan-out publishes to each recipient's)."""
    key_prefix = key()
    return [f"{key_prefix}live:channel:{{u{int(user_id)}}}" for user_id in user_ids]


def user_channel_template() -> str:
    """``user_channel`` with ``USER_ID_FILL`` for the user id."""
    return f"{key()}live:channel:{{u{USER_ID_FILL}}}"


def broadcast_channel(scope: str) -> str:
    """pub/sub channel: events every open page of a scope receives (``everyone`` or a
    platform name), ``{"reason": str, "scope": str}``. Each process subscribes once
    and fans an event out to its own streams (live/transport.py, ``LiveHub``)."""
    return key("live", "broadcast", scope)


def due() -> str:
    """zset: broadcast events waiting for their time (a scheduled bulletin's display
    time, an announcement's publish time), member ``<channel>\\n<event JSON>``,
    score = when (ms); core/lua/due.lua publishes and drops the due ones."""
    return key("live", "due", GLOBAL_TAG)
