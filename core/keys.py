"""Every Redis key name of the project is built here, and nowhere else.

Names follow the seeds (``notice:<platform>:<id>``, ``bulletin:update:time``,
...), preceded by ``settings.MESSAGECENTER_KEY_PREFIX``. Keys that one Lua
script touches share a hash tag (the part in braces) so that they map to one
slot on Redis Cluster; ``tests/core/test_keys.py`` checks that with
``keyslot``. Each function documents the type of the key it names.
"""

from django.conf import settings


def _key(*parts: object) -> str:
    return settings.MESSAGECENTER_KEY_PREFIX + ":".join(str(part) for part in parts)


def user_tag(user_id: int) -> str:
    """Hash tag shared by every per-user key, so one script can touch them all."""
    return f"{{u{int(user_id)}}}"


# --- core -----------------------------------------------------------------------


def user_platforms(user_id: int) -> str:
    """string: comma-separated platform codes of a user (cache of PostgreSQL)."""
    return _key("user", "platforms", user_tag(user_id))


def auth_token(token_key: str) -> str:
    """string: user id owning an API token (cache of PostgreSQL, dropped on revoke)."""
    return _key("auth", "token", token_key)


def auth_user(user_id: int) -> str:
    """string: JSON of the fields authentication needs for a user (cache of PostgreSQL)."""
    return _key("auth", "user", user_tag(user_id))


def health_probe() -> str:
    """string: written and read by /healthz."""
    return _key("healthz")


# --- notices (announcements) --------------------------------------------------------
# (owned by notices/readmodel.py)


# --- messagecenter (inbox, bulletins, messages) -------------------------------------
# (owned by messagecenter/readmodel.py)
