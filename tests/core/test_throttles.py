"""The API throttles' window in Redis: DRF's sliding-window answers, one round
trip per request, and DRF's own memory window while Redis fails."""

from typing import Any

import pytest
from django.conf import settings
from django.test import RequestFactory, override_settings
from redis.exceptions import ConnectionError as RedisConnectionError
from rest_framework.request import Request

from core import keys, readmodel
from core.redis import get_redis
from core.throttles import AnonRateThrottle, UserRateThrottle, fallback_cache, forget_history
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def rates() -> Any:
    with override_settings(
        REST_FRAMEWORK={**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"anon": "3/min", "user": "3/min"}}
    ):
        yield


def _request(user: Any = None) -> Request:
    request = Request(RequestFactory().get("/api/v1/inbox/counts/", REMOTE_ADDR="10.1.2.3"))
    if user is not None:
        request.user = user
    return request


def _throttle(kind: type, clock: Clock) -> Any:
    throttle = kind()
    throttle.timer = clock
    return throttle


def _wait_drf_would_give(times: list[float], now: float, duration: float, limit: int) -> float:
    """DRF's own wait(), from the times it would hold (newest first)."""
    remaining = duration - (now - times[-1]) if times else duration
    return remaining / (limit - len(times) + 1)


def test_user_window_slides_as_drf_s_does(rates: None) -> None:
    user = UserFactory()
    name = f"throttle_user_{user.pk}"
    forget_history(name)
    clock = Clock(1_000_000.0)
    granted: list[float] = []
    for step in (0.0, 10.0, 20.0):
        clock.now = 1_000_000.0 + step
        assert _throttle(UserRateThrottle, clock).allow_request(_request(user), None)
        granted.insert(0, clock.now)
    clock.now = 1_000_030.0
    refused = _throttle(UserRateThrottle, clock)
    assert not refused.allow_request(_request(user), None)
    assert refused.wait() == pytest.approx(_wait_drf_would_give(granted, clock.now, 60, 3))
    # The refusal took no place in the window; the key lives no longer than it.
    window = get_redis().zrange(keys.throttle(name), 0, -1, withscores=True)
    assert [score for _, score in window] == [1_000_000_000, 1_000_010_000, 1_000_020_000]
    assert 0 < get_redis().pttl(keys.throttle(name)) <= 60_000
    # At exactly a window after the first request, it has left the window.
    clock.now = 1_000_060.0
    assert _throttle(UserRateThrottle, clock).allow_request(_request(user), None)
    clock.now = 1_000_060.5
    assert not _throttle(UserRateThrottle, clock).allow_request(_request(user), None)
    other = UserFactory()
    forget_history(f"throttle_user_{other.pk}")
    assert _throttle(UserRateThrottle, clock).allow_request(_request(other), None)  # a budget of its own


def test_anonymous_callers_are_counted_by_address(rates: None) -> None:
    forget_history("throttle_anon_10.1.2.3")
    clock = Clock(2_000_000.0)
    answers = [_throttle(AnonRateThrottle, clock).allow_request(_request(), None) for _ in range(4)]
    assert answers == [True, True, True, False]
    assert get_redis().zcard(keys.throttle("throttle_anon_10.1.2.3")) == 3


def test_one_round_trip_per_request(rates: None, monkeypatch: pytest.MonkeyPatch) -> None:
    user = UserFactory()
    forget_history(f"throttle_user_{user.pk}")
    client = get_redis()
    # A single Redis: every round trip takes a pooled connection; a cluster: every command is counted.
    target, method = (
        (client.connection_pool, "get_connection")
        if hasattr(client, "connection_pool")
        else (client, "execute_command")
    )
    taken = []
    original = getattr(target, method)
    monkeypatch.setattr(target, method, lambda *a, **k: taken.append(1) or original(*a, **k))
    for _ in range(4):
        _throttle(UserRateThrottle, Clock(3_000_000.0)).allow_request(_request(user), None)
    assert len(taken) == 4


def test_redis_failing_counts_in_memory(rates: None, monkeypatch: pytest.MonkeyPatch) -> None:
    user = UserFactory()
    fallback_cache.clear()

    def down(**kwargs: Any) -> Any:
        raise RedisConnectionError("down")

    monkeypatch.setattr(readmodel, "throttle_hit", down)
    clock = Clock(4_000_000.0)
    answers = [_throttle(UserRateThrottle, clock).allow_request(_request(user), None) for _ in range(4)]
    assert answers == [True, True, True, False]
    assert fallback_cache.get(f"throttle_user_{user.pk}") is not None
    fallback_cache.clear()
