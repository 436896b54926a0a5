"""API tokens: a new token per sign-in, only its digest stored.

A token is ``mc_`` and 32 random bytes (base64url). PostgreSQL keeps its
SHA-256 digest, never the token; authentication's Redis entry is keyed by
that digest too (``keys.auth_token``), so neither store, nor a log line,
holds anything a client could present. The token carries 256 random bits:
no key is needed to make its digest safe against guessing, and none has to
be rotated with SECRET_KEY.

A token ends when it expires (``MESSAGECENTER_TOKEN_TTL_DAYS``), when its
client revokes it, when its user's password changes (each token remembers a
fingerprint of the password hash it was issued under: authentication refuses
a mismatch, and ``tokens_end_stale`` deletes such rows) and when its user is
deactivated.
"""

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from accounts.models import ApiToken

PREFIX = "mc_"
# How precise a token's ``last_used_at`` is (accounts/authentication.py writes it).
LAST_USED_PRECISION = timedelta(hours=1)


@dataclass(frozen=True)
class IssuedToken:
    token: str  # shown once, to the client that signed in
    row: ApiToken


@dataclass(frozen=True)
class TokenAuth:
    """``request.auth`` of a request signed with a token: which token it was."""

    id: int
    expires_at: datetime


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def password_mark(password_hash: str) -> str:
    """A short fingerprint of a password hash (itself salted): equal while the password is unchanged."""
    return hashlib.sha256(password_hash.encode()).hexdigest()[:16]


def token_lifetime() -> timedelta:
    return timedelta(days=settings.MESSAGECENTER_TOKEN_TTL_DAYS)


def token_issue(*, user: User, now: datetime | None = None) -> IssuedToken:
    """A new token for ``user`` (every sign-in gets its own; the others keep working)."""
    now = now or timezone.now()
    token = PREFIX + secrets.token_urlsafe(32)
    row = ApiToken.objects.create(
        user=user,
        digest=token_digest(token),
        password_mark=password_mark(user.password or ""),
        created_at=now,
        expires_at=now + token_lifetime(),
    )
    return IssuedToken(token=token, row=row)


def token_revoke(*, user_id: int, token_id: int) -> bool:
    """End one of the user's tokens; False when the user has no token of that id."""
    row = ApiToken.objects.filter(user_id=user_id, pk=token_id).first()
    if row is None:
        return False
    row.delete()  # one row, so the receiver drops its cache entry after commit
    return True


def tokens_of(*, user_id: int) -> list[ApiToken]:
    """The user's tokens, newest first (expired ones included until they are cleaned up)."""
    return list(ApiToken.objects.filter(user_id=user_id).order_by("-created_at", "-id"))


def tokens_end_stale(*, user: User) -> int:
    """Delete the user's tokens that can no longer answer: all of them for an
    inactive user, those issued under another password otherwise. Returns how
    many went."""
    stale = ApiToken.objects.filter(user_id=user.pk)
    if user.is_active:
        stale = stale.exclude(password_mark=password_mark(user.password or ""))
    with transaction.atomic():
        deleted, _ = stale.delete()
    return deleted


def tokens_delete_expired(*, now: datetime | None = None) -> int:
    """Remove expired tokens' rows (a periodic clean-up; they already answer 401)."""
    deleted, _ = ApiToken.objects.filter(expires_at__lte=now or timezone.now()).delete()
    return deleted


def token_fields(row: dict[str, Any], *, owner_password: str) -> dict[str, Any] | None:
    """What authentication's cache entry keeps of a token row (the row's
    ``id``, ``expires_at`` and ``password_mark``); None when the token was
    issued under another password."""
    if row["password_mark"] != password_mark(owner_password or ""):
        return None
    return {"id": row["id"], "expires_at": row["expires_at"].isoformat()}


def token_auth(fields: Any, now: datetime) -> TokenAuth | None:
    """The token a cached entry's ``token`` fields describe, None when they are
    malformed or the token expired at ``now``."""
    if not isinstance(fields, dict):
        return None
    expires_at = parse_datetime(str(fields.get("expires_at") or ""))
    if expires_at is None or now >= expires_at:
        return None
    return TokenAuth(id=int(fields["id"]), expires_at=expires_at)
