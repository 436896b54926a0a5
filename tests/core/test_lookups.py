"""``field__any_of``: the same rows as ``field__in``, sent as one array on PostgreSQL."""

from typing import Any
from unittest import mock

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models.sql.query import Query

from core.api.lookups import Whole
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
        # The whole list as one array, not a placeholder per value; plain
        # integers as one array literal.
        assert "= ANY(%s::bigint[])" in sql
        assert params == ("{" + ",".join(map(str, wanted)) + "}",)
    else:
        assert " IN (" in sql
        assert len(params) == len(wanted)


def test_any_of_takes_values_that_are_not_plain_integers_one_by_one() -> None:
    """Strings, integers for a text column, and on PostgreSQL integers past
    64 bits (which no row holds) keep the prepared array: the same rows as
    ``in``, never a database error."""
    user: Any = UserFactory()
    User = get_user_model()
    assert list(User.objects.filter(pk__any_of=[str(user.pk), "7"]).values_list("pk", flat=True)) == [user.pk]
    if connection.vendor == "postgresql":  # (SQLite's driver refuses such an integer in any query)
        assert list(User.objects.filter(pk__any_of=[user.pk, 2**70]).values_list("pk", flat=True)) == [user.pk]
    names = User.objects.filter(username__any_of=[user.username, "nobody"]).values_list("username", flat=True)
    assert list(names) == [user.username]
    # Integers for a text column are prepared as text, as ``in`` does.
    numbered: Any = UserFactory(username="12345")
    found = User.objects.filter(username__any_of=[12345, 7]).values_list("pk", flat=True)
    assert list(found) == [numbered.pk]


def test_a_whole_list_finds_the_same_rows_without_django_walking_it() -> None:
    """``Whole(values)``: the same query and rows as the plain list, but Django
    no longer checks each value on its way to the lookup (for a relation's
    column it looks at every value's model: most of a large list's cost)."""
    users = [UserFactory() for _ in range(3)]
    for user in users:
        MutePeriod.objects.create(user=user, category="promotion", start_ms=1)
    wanted = [users[0].pk, users[2].pk, *range(10**9, 10**9 + 500)]
    checked: list[Any] = []
    original = Query.check_query_object_type

    def counting(self: Query, value: Any, opts: Any, field: Any) -> None:
        checked.append(value)
        original(self, value, opts, field)

    with mock.patch.object(Query, "check_query_object_type", counting):
        plain = MutePeriod.objects.filter(user_id__any_of=wanted).order_by("user_id")
        walked = len(checked)
        whole = MutePeriod.objects.filter(user_id__any_of=Whole(wanted)).order_by("user_id")
    assert walked == len(wanted)  # the plain list: one check per value
    assert len(checked) == walked  # the whole one: none
    assert whole.query.sql_with_params() == plain.query.sql_with_params()
    assert list(whole.values_list("user_id", flat=True)) == [users[0].pk, users[2].pk]
    User = get_user_model()
    assert list(User.objects.filter(pk__any_of=Whole(iter(wanted))).values_list("pk", flat=True).order_by("pk")) == [
        users[0].pk,
        users[2].pk,
    ]
