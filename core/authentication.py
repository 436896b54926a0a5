"""Authentication whose credential lookups cost no SQL once cached.

The inbox hot path must run no SQL at all, authentication included. Token
keys map to user ids, and user ids to the user's own fields, in Redis; both
entries are dropped after the commit that revokes a token or changes a user
(``core.signals``), so revocation takes effect at once. When Redis is down
the lookups fall back to PostgreSQL.
"""

import logging
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import User
from redis.exceptions import RedisError
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication as DRFTokenAuthentication
from rest_framework.authtoken.models import Token

from core import readmodel
from core.selectors import PLATFORMS_ATTR, user_platforms

logger = logging.getLogger(__name__)

# Fields rebuilt from the cache: everything a request handler reads on
# ``request.user``, including the password hash that session auth compares.
_USER_FIELDS = (
    "id", "password", "last_login", "is_superuser", "username", "first_name", "last_name",
    "email", "is_staff", "is_active", "date_joined",
)  # fmt: skip


def _snapshot(user: User) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for name in _USER_FIELDS:
        value = getattr(user, name)
        data[name] = value.isoformat() if hasattr(value, "isoformat") else value
    # Every inbox request needs the platforms (announcement counts): carry them.
    data["platforms"] = user_platforms(user=user)
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


def cached_user(user_id: int) -> User | None:
    """The user with this id, from the cache when present; None if absent."""
    try:
        data = readmodel.user_fields_get(user_id=user_id)
    except RedisError:
        data = None
    if data is not None:
        return _restore(data)
    user = get_user_model().objects.filter(pk=user_id).first()
    if user is not None:
        try:
            readmodel.user_fields_set(user_id=user.pk, fields=_snapshot(user))
        except RedisError:
            logger.warning("redis unavailable; user %s not cached", user_id)
    return user


class TokenAuthentication(DRFTokenAuthentication):
    """``Authorization: Token <key>``, with the key -> user lookup cached."""

    keyword = "Token"

    def authenticate_credentials(self, key: str) -> tuple[User, Token | str]:
        try:
            user_id = readmodel.token_user_get(token_key=key)
        except RedisError:
            return super().authenticate_credentials(key)
        user: User | None
        if user_id is None:
            token = Token.objects.select_related("user").filter(key=key).first()
            if token is None:
                raise exceptions.AuthenticationFailed("Invalid token.")
            user = token.user
            try:
                readmodel.token_user_set(token_key=key, user_id=user.pk)
                readmodel.user_fields_set(user_id=user.pk, fields=_snapshot(user))
            except RedisError:
                pass
        else:
            user = cached_user(user_id)
        if user is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        if not user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        return user, key


class CachedModelBackend(ModelBackend):
    """Session authentication's per-request ``get_user`` served from the cache."""

    def get_user(self, user_id: Any) -> User | None:
        try:
            user = cached_user(int(user_id))
        except (TypeError, ValueError):
            return None
        return user if user is not None and self.user_can_authenticate(user) else None
