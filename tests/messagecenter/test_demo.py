from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from messagecenter.models import Bulletin, Message, UserGroup
from messagecenter.selectors import inbox_counts, inbox_list

pytestmark = pytest.mark.django_db(transaction=True)


def test_seed_demo_is_idempotent() -> None:
    call_command("seed_demo", stdout=StringIO())
    call_command("seed_demo", stdout=StringIO())
    assert set(UserGroup.objects.values_list("name", flat=True)) >= {"staff-news", "vip"}
    assert Message.objects.count() == 4
    assert Bulletin.objects.count() == 2
    assert {m.delivery for m in Message.objects.all()} == {"push", "pull"}
    from django.contrib.auth import get_user_model

    alice: Any = get_user_model().objects.get(username="alice")
    page = inbox_list(user=alice)
    assert len(page.results) == 6  # 2 bulletins + system, promotion, transaction, interaction
    assert inbox_counts(user=alice)["unread"] == 6
