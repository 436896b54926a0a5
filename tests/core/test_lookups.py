"""``field__any_of``: the same rows as ``field__in``, sent as one array on PostgreSQL."""

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from messagecenter.models import MutePeriod
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_any_of_finds_what_in_finds_on_plain_and_related_fields() -> None:
    users = [UserFactory() for _ in range(3)]
    wanted = [users[0].pk, users[2].pk, 10**9]  # one id that no user has
    User = get_user_model()
    assert set(User.objects.filter(pk__any_of=wanted).values_list("pk", flat=True)) == {users[0].pk, users[2].pk}
    assert not User.objects.filter(pk__any_of=[]).exists()
    for user in users:
        MutePeriod.objects.create(user=user, category="promotion", start_ms=1)
    related = MutePeriod.objects.filter(user_id__any_of=wanted).values_list("user_id", flat=True)
    assert sorted(related) == sorted(MutePeriod.objects.filter(user_id__in=wanted).values_list("user_id", flat=True))
    assert set(MutePeriod.objects.filter(user__any_of=wanted).values_list("user_id", flat=True)) == set(related)


def test_any_of_sends_one_parameter_however_many_values() -> None:
    user: Any = UserFactory()
    wanted = [user.pk, *range(10**9, 10**9 + 5_000)]
    found = get_user_model().objects.filter(pk__any_of=wanted).values_list("pk", flat=True)
    assert list(found) == [user.pk]
    sql, params = found.query.sql_with_params()
    if connection.vendor == "postgresql":
        assert "= ANY(%s)" in sql
        assert params == (wanted,)  # the whole list as one array, not a placeholder per value
    else:
        assert " IN (" in sql
        assert len(params) == len(wanted)
