"""Authentication whose credential lookups cost no SQL once cached.

The inbox hot path must run no SQL at all, authentication included. An API
token maps to its owner's fields in one Redis entry (one GET per request),
and a user id to the same fields for session authentication. Entries are
dropped after the commit that revokes a token or changes a user or their
platforms (``core.signals``), so revocation takes effect at once. When Redis
is down the lookups fall back to PostgreSQL.

A request that misses the cache fills it from PostgreSQL. A revocation that
commits while it reads would have dropped the entry before the fill wrote it,
so after writing, the filler reads PostgreSQL once more and drops its own
entry if the row moved on: a stale entry never survives the race.
"""

import logging
from collections.abc import Callable
from typing import Any

from axes.backends import AxesStandaloneBackend
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


def _fill(
    *, store: Callable[[dict[str, Any]], None], drop: Callable[[], None], load: Callable[[], User | None], user: User
) -> None:
    """Cache ``user``'s snapshot, then re-read PostgreSQL (``load``) and drop
    the entry again if a change committed meanwhile (see the module docstring)."""
    snapshot = _snapshot(user)
    try:
        store(snapshot)
        again = load()
        if again is None or _snapshot(again) != snapshot:
            drop()
    except RedisError:
        logger.warning("redis unavailable; user %s not cached", user.pk)


def _user_by_id(user_id: int) -> User | None:
    return get_user_model().objects.filter(pk=user_id).first()


def cached_user(user_id: int) -> User | None:
    """The user with this id, from the cache when present; None if absent."""
    try:
        data = readmodel.user_fields_get(user_id=user_id)
    except RedisError:
        data = None
    if data is not None:
        return _restore(data)
    user = _user_by_id(user_id)
    if user is not None:
        _fill(
            store=lambda fields: readmodel.user_fields_set(user_id=user_id, fields=fields),
            drop=lambda: readmodel.user_drop(user_id=user_id),
            load=lambda: _user_by_id(user_id),
            user=user,
        )
    return user


def _token_owner(key: str) -> User | None:
    token = Token.objects.select_related("user").filter(key=key).first()
    return token.user if token is not None else None


class TokenAuthentication(DRFTokenAuthentication):
    """``Authorization: Token <key>``: one Redis GET holds the owner's fields."""

    keyword = "Token"

    def authenticate_credentials(self, key: str) -> tuple[User, Token | str]:
        try:
            data = readmodel.token_user_get(token_key=key)
        except RedisError:
            return super().authenticate_credentials(key)
        user: User | None
        if data is not None:
            user = _restore(data)
        else:
            user = _token_owner(key)
            if user is None:
                raise exceptions.AuthenticationFailed("Invalid token.")
            _fill(
                store=lambda fields: readmodel.token_user_set(token_key=key, fields=fields),
                drop=lambda: readmodel.token_drop(token_key=key),
                load=lambda: _token_owner(key),
                user=user,
            )
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
