from typing import Any

import pytest

from accounts import keys as account_keys
from accounts.models import UserPlatform
from accounts.selectors import platform_user_counts, user_platforms
from core.readthrough import parse
from tests.conftest import assert_error
from tests.factories import StaffFactory, UserFactory

pytestmark = pytest.mark.django_db


def test_default_platforms_staff_are_operators_others_users() -> None:
    assert user_platforms(user=StaffFactory()) == ["operator"]
    assert user_platforms(user=UserFactory()) == ["user"]


def test_users_without_rows_fall_back_to_the_default_rule() -> None:
    user = UserFactory()
    UserPlatform.objects.filter(user=user).delete()
    assert user_platforms(user=user) == ["user"]
    assert platform_user_counts()["user"] >= 1


@pytest.mark.django_db(transaction=True)  # the platforms leave the cache after commit
def test_operator_replaces_platforms(operator_client: Any, recipient: Any, redis: Any) -> None:
    assert user_platforms(user=recipient) == ["user"]  # fills the cache
    assert parse(redis.get(account_keys.user_platforms(recipient.pk))).value == ["user"]
    response = operator_client.put(
        f"/api/v1/manage/users/{recipient.pk}/platforms/", {"platforms": ["customer", "user"]}, format="json"
    )
    assert response.status_code == 200
    assert response.json() == {"user_id": str(recipient.pk), "platforms": ["user", "customer"]}
    assert set(UserPlatform.objects.filter(user=recipient).values_list("platform", flat=True)) == {"user", "customer"}
    # The entry was invalidated after commit, so the next read sees the change.
    assert not parse(redis.get(account_keys.user_platforms(recipient.pk))).found
    # A fresh user object (the next request's) sees the change.
    recipient = type(recipient).objects.get(pk=recipient.pk)
    assert user_platforms(user=recipient) == ["user", "customer"]


@pytest.mark.parametrize(
    "body",
    [{"platforms": ["martian"]}, {"platforms": []}, {"platforms": "user"}, {}, {"platforms": [1]}],
)
def test_bad_platforms_are_400_and_change_nothing(operator_client: Any, recipient: Any, body: Any) -> None:
    response = operator_client.put(f"/api/v1/manage/users/{recipient.pk}/platforms/", body, format="json")
    error = assert_error(response, 400, "invalid")
    assert "platforms" in error["fields"]
    assert list(UserPlatform.objects.filter(user=recipient).values_list("platform", flat=True)) == ["user"]


def test_unknown_user_is_404(operator_client: Any) -> None:
    response = operator_client.put("/api/v1/manage/users/999999/platforms/", {"platforms": ["user"]}, format="json")
    assert_error(response, 404, "not_found")


def test_platform_user_counts() -> None:
    StaffFactory()
    UserFactory.create_batch(3)
    counts = platform_user_counts()
    assert counts == {"operator": 1, "user": 3, "customer": 0}
