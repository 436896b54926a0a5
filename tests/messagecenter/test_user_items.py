"""The fill's one statement of a user's items (``messagecenter.user_rows.user_items``):
on PostgreSQL it reads times as milliseconds computed in SQL, which must equal
what ``to_ms`` gives for the same timestamps, or a filled inbox would order and
expire items a millisecond away from what deliveries wrote."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from messagecenter.models import Message
from messagecenter.readmodel import to_ms
from messagecenter.user_rows import user_items
from tests.messagecenter.conftest import send

# Deliveries run once the send commits.
pytestmark = pytest.mark.django_db(transaction=True)

# Microseconds that sit on or next to a millisecond boundary, where a time
# computed another way than to_ms's would land on the neighbouring ms.
EDGES = [0, 1, 999, 1_000, 1_001, 123_000, 123_999, 500_000, 999_000, 999_999]


@pytest.mark.parametrize("micro", EDGES)
def test_times_read_as_ms_equal_to_ms(operator: Any, recipient: Any, micro: int) -> None:
    message = send(operator, to={"users": [recipient]}, title="t")
    assert message.delivery == "push"
    created = datetime(2026, 11, 22, 10, 0, 7, micro, tzinfo=UTC)
    expire = datetime(2031, 3, 4, 5, 6, 7, (micro * 7) % 1_000_000, tzinfo=UTC)
    Message.objects.filter(pk=message.pk).update(created_at=created, expire_at=expire)
    items = user_items(int(recipient.pk), now=timezone.now(), want=10)
    [(entry, _type)] = items.entries
    assert (entry.ref, entry.score, entry.expire_ms) == (message.ref, to_ms(created), to_ms(expire))


def test_many_times_read_as_ms_equal_to_ms(operator: Any, recipient: Any) -> None:
    """A spread of times over years, at every microsecond residue step."""
    messages = [send(operator, to={"users": [recipient]}, title=f"t{i}") for i in range(40)]
    start = datetime(2020, 1, 1, tzinfo=UTC)
    want = {}
    for i, message in enumerate(messages):
        created = start + timedelta(days=37 * i, seconds=7_919 * i, microseconds=24_989 * i + i)
        Message.objects.filter(pk=message.pk).update(created_at=created, expire_at=None)
        want[message.ref] = to_ms(created)
    items = user_items(int(recipient.pk), now=timezone.now(), want=100)
    assert {e.ref: e.score for e, _ in items.entries} == want
    assert {e.expire_ms for e, _ in items.entries} == {0}
