"""Authentication whose credential lookups cost no SQL once cached.

The inbox hot path must run no SQL at all, authentication included. An API
token's digest (accounts/tokens.py) maps to its owner's fields and the token's
expiry in one Redis entry (one GET per request),
and a user id to the same fields for session authentication. Both are
read-through entries (core/readthrough.py): a bad token or unknown id is
remembered as a miss, concurrent misses of one key cost one query, and
entries expire logically with jitter. After the commit that revokes a token
or changes a user or their platforms, ``accounts.signals`` replaces the entries
with tombstones, so revocation takes effect at once, and a fill that read
PostgreSQL before that commit does not store its copy. When Redis is down
the lookups read PostgreSQL. Each authenticated user is recorded as active
for the day (insight/activity.py: at most one Redis command per process and day).
"""

from typing import Any

from axes.backends import AxesStandaloneBackend
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import User
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication as DRFTokenAuthentication

from accounts import keys as account_keys
from accounts.models import ApiToken
from accounts.selectors import PLATFORMS_ATTR, platforms_of
from accounts.tokens import LAST_USED_PRECISION, TokenAuth, token_auth, token_digest, token_fields
from core.readthrough import auth_policy, read_through
from insight.activity import record_active

# Fields rebuilt from the cache: everything a request handler reads on
# ``request.user``, including the password hash that session auth compares.
_USER_FIELDS = (
    "id", "password", "last_login", "is_superuser", "username", "first_name", "last_name",
    "email", "is_staff", "is_active", "date_joined",
)  # fmt: skip


# A fill reads the user's fields and their platforms in one query: the
# platforms' rows joined (one row per platform; a user with none stored comes
# as one row, and the default rule applies). Every inbox request needs the
# platforms (announcement counts), so the snapshot carries them. Read here,
# not through the platforms' own cache entry, whose lookup, fill lock and
# store were three more round trips on every cold request; a platform change
# drops the snapshots as well as that entry, so a fill that read before it is
# refused all the same.
_PLATFORM = "platform_memberships__platform"


def _snapshot(rows: list[dict[str, Any]], prefix: str = "") -> dict[str, Any] | None:
    """A snapshot from the joined rows (field names under ``prefix``), None for none."""
    if not rows:
        return None
    data: dict[str, Any] = {}
    for name in _USER_FIELDS:
        value = rows[0][prefix + name]
        data[name] = value.isoformat() if hasattr(value, "isoformat") else value
    stored = [row[prefix + _PLATFORM] for row in rows if row[prefix + _PLATFORM] is not None]
    data["platforms"] = platforms_of(stored=stored, is_staff=bool(data["is_staff"]))
    return data


def _restore(data: dict[str, Any]) -> User:
    model = get_user_model()
    fields = {f.attname: f for f in model._meta.concrete_fields}
    values = {name: fields[name].to_python(data.get(name)) for name in _USER_FIELDS if name in fields}
    user = model(**values)
    user._state.adding = False
    user._state.db = "default"
    if isinstance(data.get("platforms"), list):
        setattr(user, PLATFORMS_ATTR, tuple(data["platforms"]))
    return user


def _user_snapshot_by_id(user_id: int) -> dict[str, Any] | None:
    return _snapshot(list(get_user_model().objects.filter(pk=user_id).values(*_USER_FIELDS, _PLATFORM)))


def cached_user(user_id: int) -> User | None:
    """The user with this id, from the cache when present; None if absent."""
    data = read_through(account_keys.auth_user(user_id), lambda: _user_snapshot_by_id(user_id), policy=auth_policy())
    return _restore(data) if data is not None else None


_TOKEN_FIELDS = ("id", "expires_at", "password_mark", "last_used_at")


def _owner_snapshot(digest: str) -> dict[str, Any] | None:
    """The owner's fields and the token's (``token``: its id and expiry) for a
    token that has not expired and was issued under the owner's current
    password; None otherwise."""
    now = timezone.now()
    fields = [*_TOKEN_FIELDS, *(f"user__{name}" for name in (*_USER_FIELDS, _PLATFORM))]
    rows = list(ApiToken.objects.filter(digest=digest, expires_at__gt=now).values(*fields))
    data = _snapshot(rows, prefix="user__")
    if data is None:
        return None
    token = token_fields(rows[0], owner_password=rows[0]["user__password"])
    if token is None:
        return None
    data["token"] = token
    # "Last used" to the hour: at most one write per token and hour, and only
    # when a fill reads the token (never on a request the cache answers).
    last_used = rows[0]["last_used_at"]
    if last_used is None or now - last_used >= LAST_USED_PRECISION:
        ApiToken.objects.filter(pk=token["id"]).update(last_used_at=now)
    return data


class TokenAuthentication(DRFTokenAuthentication):
    """``Authorization: Token <token>``: one Redis GET, under the token's
    digest, holds the owner's fields and the token's expiry."""

    keyword = "Token"

    def authenticate_credentials(self, key: str) -> tuple[User, TokenAuth]:
        digest = token_digest(key)
        data = read_through(account_keys.auth_token(digest), lambda: _owner_snapshot(digest), policy=auth_policy())
        if data is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        token = token_auth(data.get("token"), timezone.now())
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid or expired token.")
        user = _restore(data)
        if not user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        record_active(user_id=user.pk)
        return user, token


class CachedModelBackend(ModelBackend):
    """Session authentication's per-request ``get_user`` served from the cache."""

    def get_user(self, user_id: Any) -> User | None:
        try:
            user = cached_user(int(user_id))
        except (TypeError, ValueError):
            return None
        if user is None or not self.user_can_authenticate(user):
            return None
        record_active(user_id=user.pk)
        return user


class LoginLimitBackend(AxesStandaloneBackend):
    """django-axes' lockout check, for sign-ins that come with a request.

    Every sign-in from outside (the login pages, the admin, the token
    endpoint) carries its request; a call without one is in-process (a
    management command, the test client's ``login``) and is no guessing
    attempt, where axes would refuse it outright."""

    def authenticate(
        self, request: Any, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> Any:
        if request is None:
            return None
        return super().authenticate(request, username, password, **kwargs)
