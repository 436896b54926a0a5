"""Redis key names of the accounts app: read-through entries of a user's platforms,
of a token and of a user, built on ``core.keys``."""

from core.keys import key, user_tag


def user_platforms(user_id: int) -> str:
    """string: a read-through entry (core/readthrough.py) of the user's platform codes."""
    return key("user", "platforms", user_tag(user_id))


def auth_token(digest: str) -> str:
    """string: a read-through entry (core/readthrough.py) of the token owner's fields and the
    token's expiry, or of the token's absence; a tombstone after a revocation or user change.
    Named by the token's digest (accounts/tokens.py), never the token; the digest is the hash
    tag, which the entry's fill lock (``fill_lock``) shares."""
    return key("auth", "token", f"{{t{digest}}}")


def auth_user(user_id: int) -> str:
    """string: a read-through entry (core/readthrough.py) of the fields authentication needs
    for a user, or of the id's absence (cache of PostgreSQL)."""
    return key("auth", "user", user_tag(user_id))
