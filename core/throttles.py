"""The API's throttles, counting in Redis and, while Redis is down, in memory.

They read their rates from ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]`` each
time one is built (once per request): DRF's own classes copy the rates when
their module is imported, so a changed setting would not reach them.

DRF's throttles keep each client's request history in Django's cache, which
swallows Redis errors (``IGNORE_EXCEPTIONS``): with Redis down every history
read would come back empty and every limit would be off. Here the history
goes to Redis while the circuit breaker (core/breaker.py) is closed and to a
per-process memory cache while it is open. The memory counts are per process
(a client spread over N workers gets up to N times the rate) and start empty
when the outage starts and again when it ends: a rougher limit, but a limit.
"""

from typing import Any, cast

from django.core.cache import cache as shared_cache
from django.core.cache.backends.base import DEFAULT_TIMEOUT, BaseCache
from django.core.cache.backends.locmem import LocMemCache
from rest_framework import throttling
from rest_framework.settings import api_settings

from core.breaker import any_open

_MISSING = object()


class FallbackCache(BaseCache):
    """The two cache calls DRF's throttles make (get, set), with the memory fallback."""

    def __init__(self) -> None:
        super().__init__({})
        self.local = LocMemCache("throttles", {"OPTIONS": {"MAX_ENTRIES": 100_000}})

    def get(self, key: str, default: Any = None, version: int | None = None) -> Any:
        if not any_open():
            value = shared_cache.get(key, _MISSING)
            # Asked again after the call: the call itself may be the one that
            # found Redis dead (and, its error swallowed, answered "missing").
            if not any_open():
                return default if value is _MISSING else value
        return self.local.get(key, default)

    def set(self, key: str, value: Any, timeout: float | None = DEFAULT_TIMEOUT, version: int | None = None) -> None:
        if not any_open():
            shared_cache.set(key, value, timeout)
            if not any_open():
                return
        self.local.set(key, value, timeout)


fallback_cache = FallbackCache()


class _Throttle(throttling.SimpleRateThrottle):
    cache = fallback_cache

    def __init__(self) -> None:
        # Rate strings ("60/min") or None; the stubs type the setting loosely.
        self.THROTTLE_RATES = cast(dict[str, str | None], api_settings.DEFAULT_THROTTLE_RATES)
        super().__init__()


class AnonRateThrottle(_Throttle, throttling.AnonRateThrottle):
    pass


class UserRateThrottle(_Throttle, throttling.UserRateThrottle):
    pass
