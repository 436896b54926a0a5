"""The API's rate throttles: DRF's anonymous and per-user ones, reading their
rates from ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]`` when each is built
(once per request). DRF's own classes copy the rates when the module is
imported, so a changed setting (``override_settings``) would not reach them.
"""

from typing import cast

from rest_framework import throttling
from rest_framework.settings import api_settings


class _RatesFromSettings(throttling.SimpleRateThrottle):
    def __init__(self) -> None:
        # Rate strings ("60/min") or None; the stubs type the setting loosely.
        self.THROTTLE_RATES = cast(dict[str, str | None], api_settings.DEFAULT_THROTTLE_RATES)
        super().__init__()


class AnonRateThrottle(_RatesFromSettings, throttling.AnonRateThrottle):
    pass


class UserRateThrottle(_RatesFromSettings, throttling.UserRateThrottle):
    pass
