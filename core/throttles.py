"""The API's throttles, counting in Redis and, while Redis is down, in memory.

DRF keeps each client's request times as one pickled list in the cache: a
GET and a SET of up to a whole window's times per request, two round trips
on every API call. Here the same sliding window lives in a Redis sorted set
that one script trims, checks and extends (core/lua/throttle.lua): one round
trip whatever the rate, and DRF's answers (429, its Retry-After) unchanged.

They read their rates from ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]`` each
time one is built (once per request): DRF's own classes copy the rates when
their module is imported, so a changed setting would not reach them.

While Redis is down (the circuit breaker, core/breaker.py, is open, or the
script's call fails) the window is DRF's own list kept in a per-process
memory cache. Those counts are per process (a client spread over N workers
gets up to N times the rate) and start empty when the outage starts and again
when it ends: a rougher limit, but a limit.
"""

from typing import Any, cast

from django.core.cache.backends.locmem import LocMemCache
from redis.exceptions import RedisError
from rest_framework import throttling
from rest_framework.settings import api_settings

from core import readmodel
from core.breaker import any_open

# DRF's window of each client while Redis is down.
fallback_cache = LocMemCache("throttles", {"OPTIONS": {"MAX_ENTRIES": 100_000}})


def forget_history(*names: str) -> None:
    """Forget these clients' recent requests (DRF's keys, ``throttle_<scope>_<ident>``),
    in Redis and in this process's memory: their next request starts a fresh window."""
    readmodel.throttle_forget(names=names)
    fallback_cache.delete_many(list(names))


class _Throttle(throttling.SimpleRateThrottle):
    cache = fallback_cache

    def __init__(self) -> None:
        # Rate strings ("60/min") or None; the stubs type the setting loosely.
        self.THROTTLE_RATES = cast(dict[str, str | None], api_settings.DEFAULT_THROTTLE_RATES)
        super().__init__()

    def allow_request(self, request: Any, view: Any) -> bool:
        if self.rate is None:
            return True
        self.key = self.get_cache_key(request, view)
        if self.key is None:
            return True
        if not any_open():
            try:
                allowed = self._allow_in_redis(self.key)
            except (RedisError, OSError):
                pass  # DRF's way below counts in this process's memory meanwhile
            else:
                return allowed
        return super().allow_request(request, view)

    # Set by SimpleRateThrottle.__init__ from the rate (the stubs do not declare them).
    num_requests: int
    duration: int

    def _allow_in_redis(self, name: str) -> bool:
        self.now = self.timer()
        allowed, count, oldest_ms = readmodel.throttle_hit(
            name=name, now_ms=int(self.now * 1000), window_ms=int(self.duration * 1000), limit=int(self.num_requests)
        )
        # DRF's wait() reads the window's size and its oldest time (the list's last) from history.
        self.history = [oldest_ms / 1000] * count if count else []
        return allowed


class AnonRateThrottle(_Throttle, throttling.AnonRateThrottle):
    pass


class UserRateThrottle(_Throttle, throttling.UserRateThrottle):
    pass
