"""The core app's Redis read model: the only core module that sends Redis commands.

It caches what every request needs and PostgreSQL would otherwise answer:
a user's platforms, and the credential lookups of authentication (token ->
the owner's fields, one GET per API request; user id -> the user's fields,
for sessions). Every entry is dropped after the commit that changes its
source, so a revoked token or a deactivated user stops working at once; TTLs
only bound memory.
"""

import json
from collections.abc import Iterable
from typing import Any

from django.conf import settings

from core import keys
from core.redis import get_redis

PLATFORM_CACHE_TTL = 60 * 60 * 24


def platforms_get(*, user_id: int) -> list[str] | None:
    cached = get_redis().get(keys.user_platforms(user_id))
    if cached is None:
        return None
    return [p for p in cached.decode().split(",") if p]


def platforms_set(*, user_id: int, platforms: list[str]) -> None:
    get_redis().set(keys.user_platforms(user_id), ",".join(platforms), ex=PLATFORM_CACHE_TTL)


def token_user_get(*, token_key: str) -> dict[str, Any] | None:
    """The owner's fields cached under an API token, or None."""
    value = get_redis().get(keys.auth_token(token_key))
    return json.loads(value) if value is not None else None


def token_user_set(*, token_key: str, fields: dict[str, Any]) -> None:
    get_redis().set(keys.auth_token(token_key), json.dumps(fields), ex=settings.MESSAGECENTER_AUTH_CACHE_TTL)


def token_drop(*, token_key: str) -> None:
    get_redis().delete(keys.auth_token(token_key))


def user_fields_get(*, user_id: int) -> dict[str, Any] | None:
    value = get_redis().get(keys.auth_user(user_id))
    return json.loads(value) if value is not None else None


def user_fields_set(*, user_id: int, fields: dict[str, Any]) -> None:
    get_redis().set(keys.auth_user(user_id), json.dumps(fields), ex=settings.MESSAGECENTER_AUTH_CACHE_TTL)


def user_drop(*, user_id: int, token_keys: Iterable[str] = ()) -> None:
    """Forget every cached copy of the user (by id, and under each of
    ``token_keys``) and their platforms, which those copies carry too."""
    get_redis().delete(keys.auth_user(user_id), keys.user_platforms(user_id), *map(keys.auth_token, token_keys))


def health_probe() -> None:
    """Write and read one key: raises RedisError when Redis is unusable."""
    client = get_redis()
    client.set(keys.health_probe(), "1", ex=60)
    client.get(keys.health_probe())
