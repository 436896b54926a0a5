"""The API's throttles are DRF's own, counting in Django's cache: a caller past
its rate gets 429 in the error envelope with ``Retry-After``, signed-in
callers per user, anonymous ones per address."""

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from tests.conftest import assert_error, client_for
from tests.factories import UserFactory
from tests.fixtures.throttles import throttle_rates

pytestmark = pytest.mark.django_db

COUNTS = "/api/v1/inbox/counts/"
TOKEN = "/api/v1/auth/token/"


def test_a_user_past_the_rate_gets_the_envelope_and_retry_after() -> None:
    user, other = UserFactory(), UserFactory()
    windows = (f"throttle_user_{user.pk}", f"throttle_user_{other.pk}")
    with throttle_rates({"user": "3/min"}, clients=windows):
        client = client_for(user)
        assert [client.get(COUNTS).status_code for _ in range(3)] == [200, 200, 200]
        refused = client.get(COUNTS)
        assert_error(refused, 429, "throttled")
        assert 0 < int(refused["Retry-After"]) <= 60
        # The window is DRF's list of request times, in Django's cache; a refusal takes no place in it.
        assert len(cache.get(windows[0])) == 3
        # A write is refused the same way, before its view runs.
        assert_error(client.post("/api/v1/inbox/read-all/", {}, format="json"), 429, "throttled")
        assert client_for(other).get(COUNTS).status_code == 200  # a budget of its own


def test_anonymous_callers_are_counted_by_address() -> None:
    first, second = "10.1.2.3", "10.1.2.4"
    windows = (f"throttle_anon_{first}", f"throttle_anon_{second}")
    wrong = {"username": "nobody", "password": "wrong"}
    with throttle_rates({"anon": "2/min"}, clients=windows):
        anonymous = APIClient(REMOTE_ADDR=first)
        statuses = [anonymous.post(TOKEN, wrong, format="json").status_code for _ in range(3)]
        assert statuses == [400, 400, 429]
        assert int(anonymous.post(TOKEN, wrong, format="json")["Retry-After"]) > 0
        assert APIClient(REMOTE_ADDR=second).post(TOKEN, wrong, format="json").status_code == 400  # its own budget
