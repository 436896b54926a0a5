"""The base of every Redis key name (the prefix, ``key()``, the per-user hash tag, the
shared global tag) and core's own keys. Each app names its keys in its own ``keys``
module, built on ``key()`` (docs/ARCHITECTURE.md lists them all).

Every name is preceded by the configured key prefix. Keys that one Lua script touches share
a hash tag (the part in braces) so that they map to one slot on Redis Cluster;
the tests check that with ``redis.cluster.key_slot``.
Each function documents the type of the key it names.
"""

from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

# Key names are built on every hot-path call (a fan-out builds about a dozen
# per recipient): the prefix is read from settings once, not per key.
_prefix: str | None = None


@receiver(setting_changed, dispatch_uid="core_keys_prefix")
def _prefix_changed(*, setting: str, **kwargs: Any) -> None:
    global _prefix
    if setting == "MESSAGECENTER_KEY_PREFIX":
        _prefix = None


def prefix() -> str:
    """The prefix every key name starts with (callers memoising key lists key them by it)."""
    global _prefix
    if _prefix is None:
        _prefix = str(settings.MESSAGECENTER_KEY_PREFIX)
    return _prefix


def key(*parts: object) -> str:
    """The prefixed name of ``parts`` joined by colons (each app's keys module names its keys with it)."""
    return prefix() + ":".join(map(str, parts))


def match_under(head: str) -> str:
    """SCAN MATCH glob of every key name that starts with ``head`` (its glob characters escaped)."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in head) + "*"


def user_tag(user_id: int) -> str:
    """Hash tag shared by every per-user key, so one script can touch them all."""
    return f"{{u{int(user_id)}}}"


# --- core -----------------------------------------------------------------------


def replica_pin(user_id: int) -> str:
    """string: present while a user's reads go to the PostgreSQL primary after a write (read-your-writes)."""
    return key("replica", "pin", user_tag(user_id))


def fill_lock(entry_key: str) -> str:
    """string: the fill lock of a read-through entry (core/readthrough.py): a random token
    with a short lease (SET NX PX). The entry's own name plus a suffix, so it keeps the
    entry's hash tag and one script can check the lock and write the entry."""
    return f"{entry_key}:fill"


def health_probe() -> str:
    """string: written and read by /healthz."""
    return key("healthz")


# --- tags and fills the apps' key names share -----------------------------------
# Global keys of the inbox and the live due-queue carry this tag, so the global
# Lua scripts can change several of them atomically (one cluster slot).
GLOBAL_TAG = "{mcg}"

# Stands for a user id in key templates (a fan-out fills a template per recipient):
# SOH occurs in no key name.
USER_ID_FILL = "\x01"
