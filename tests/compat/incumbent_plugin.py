"""pytest plugin of ``make compat-check``: each test of django-notifications-hq's
suite starts with an empty read model, as every test of the project's own
suite does (a run's leftovers must not leak into the next test)."""

import pytest


@pytest.fixture(autouse=True)
def _empty_read_model() -> None:
    # Imported here: the plugin loads before pytest-django configures Django.
    from django.core.cache import cache

    from core.breaker import reset_breakers
    from core.redis import keyspace_flush

    reset_breakers()
    keyspace_flush()
    cache.clear()
