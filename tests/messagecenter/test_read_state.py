"""The committed read state: each mark changes the user's PostgreSQL rows before
its answer (then Redis), and costs a row per month acted in, never per item
a broadcast reached."""

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import DatabaseError, connection
from django.utils import timezone
from pyroaring import BitMap

from messagecenter import services
from messagecenter.models import InboxReadMonth, InboxSeen
from messagecenter.readmodel import InboxEntry, inbox, to_ms
from messagecenter.services import read_state
from messagecenter.services.read_state import read_marks_commit, seen_commit
from notices.models import AnnouncementRead
from notices.services import announcement_mark_read, announcement_mark_unread
from tests.messagecenter.conftest import send
from tests.notices.conftest import announce, on_platforms

pytestmark = pytest.mark.django_db(transaction=True)


def _bits(user: Any, month: int) -> tuple[BitMap, BitMap]:
    row = InboxReadMonth.objects.get(user=user, month=month)
    return BitMap.deserialize(bytes(row.read)), BitMap.deserialize(bytes(row.ever))


def _read_in_redis(user: Any, ref: str, clock: Any) -> bool:
    row = inbox.inbox_get(user_id=user.pk, ref=ref, now_ms=to_ms(clock.now))
    assert row is not None
    return row.read


def test_marks_commit_the_bits_then_reach_redis(operator: Any, recipient: Any, clock: Any) -> None:
    first, second = (send(operator, to={"users": [recipient]}, title=t) for t in ("a", "b"))
    month = first.slot_month
    services.inbox_mark_read(user=recipient, item_id=first.ref)
    services.inbox_mark_read(user=recipient, item_id=second.ref)
    services.inbox_mark_unread(user=recipient, item_id=second.ref)
    read, ever = _bits(recipient, month)
    assert read == BitMap([first.slot_offset])
    assert ever == BitMap([first.slot_offset, second.slot_offset])  # ever read stays
    assert _read_in_redis(recipient, first.ref, clock) is True
    assert _read_in_redis(recipient, second.ref, clock) is False
    # A snooze leaves the item unread, in PostgreSQL too.
    services.inbox_snooze(user=recipient, item_id=first.ref, until=clock.now + timedelta(minutes=5))
    assert _bits(recipient, month)[0] == BitMap()


def test_read_all_commits_exactly_the_unread_items_of_its_category(
    operator: Any, recipient: Any, other_recipient: Any, clock: Any
) -> None:
    promo = [send(operator, to={"users": [recipient]}, category="promotion", title=f"p{i}") for i in range(3)]
    system = send(operator, to={"users": [recipient]}, title="s")
    assert services.inbox_mark_all_read(user=recipient, category="promotion") == 3
    assert _bits(recipient, system.slot_month)[0] == BitMap(m.slot_offset for m in promo)
    assert _read_in_redis(recipient, system.ref, clock) is False
    assert services.inbox_mark_all_read(user=recipient, category="promotion") == 0
    # Nothing to read is nothing to write; nobody else gets a row.
    assert services.inbox_mark_all_read(user=other_recipient) == 0
    assert not InboxReadMonth.objects.filter(user=other_recipient).exists()


def test_a_read_all_over_two_months_commits_both_or_neither(
    operator: Any, recipient: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    november = send(operator, to={"users": [recipient]}, title="november")
    clock.advance(days=10)  # into December: the next item's bit lives in another month's row
    december = send(operator, to={"users": [recipient]}, title="december")
    assert november.slot_month != december.slot_month
    for item in (november, december):  # both month rows exist, nothing read
        services.inbox_mark_read(user=recipient, item_id=item.ref)
        services.inbox_mark_unread(user=recipient, item_id=item.ref)
    real_update = read_state._row_update
    calls: list[int] = []

    def second_fails(*args: Any, **kwargs: Any) -> int:
        calls.append(1)
        if len(calls) == 2:
            raise DatabaseError("the second month's write fails")
        return real_update(*args, **kwargs)

    monkeypatch.setattr(read_state, "_row_update", second_fails)
    with pytest.raises(DatabaseError):
        services.inbox_mark_all_read(user=recipient)
    # The first month's write rolled back with the second's; Redis never heard.
    assert all(not read for read in (_bits(recipient, m.slot_month)[0] for m in (november, december)))
    assert _read_in_redis(recipient, november.ref, clock) is False
    monkeypatch.setattr(read_state, "_row_update", real_update)
    assert services.inbox_mark_all_read(user=recipient) == 2
    assert _bits(recipient, november.slot_month)[0] == BitMap([november.slot_offset])
    assert _bits(recipient, december.slot_month)[0] == BitMap([december.slot_offset])


def test_a_broadcast_costs_no_row_until_the_user_acts(operator: Any, recipient: Any, other_recipient: Any) -> None:
    everyone = send(operator, to={"everyone": True}, title="all")
    assert not InboxReadMonth.objects.exists()
    services.inbox_mark_read(user=recipient, item_id=everyone.ref)
    assert list(InboxReadMonth.objects.values_list("user_id", flat=True)) == [recipient.pk]


def test_the_watermark_only_moves_forward(recipient: Any, clock: Any) -> None:
    seen_commit(user_id=recipient.pk, seen_ms=2_000, now=clock.now)
    seen_commit(user_id=recipient.pk, seen_ms=1_000, now=clock.now)  # an older request answered late
    assert InboxSeen.objects.get(user=recipient).seen_ms == 2_000


@pytest.mark.postgres
def test_concurrent_marks_of_one_month_keep_each_others_bits(recipient: Any, clock: Any) -> None:
    """Two marks of the same user and month at once: the row lock orders them,
    so neither read-modify-write loses the other's bit."""
    offsets = list(range(0, 40, 2))
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(offsets))

    def mark(offset: int) -> None:
        try:
            barrier.wait(5)
            entry = InboxEntry(f"m{offset}", "system", 202612, offset, 0)
            read_marks_commit(user_id=recipient.pk, entries=[entry], read=True, now=clock.now)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=mark, args=(offset,)) for offset in offsets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert _bits(recipient, 202612)[0] == BitMap(offsets)


def test_announcement_reads_are_rows_per_platform_read(recipient: Any) -> None:
    on_platforms(recipient, "user", "customer")
    both = announce(["user", "customer"], publish_at=timezone.now() - timedelta(hours=1))
    assert announcement_mark_read(user=recipient, announcement_id=both.pk) is True
    assert set(AnnouncementRead.objects.filter(user=recipient).values_list("platform", flat=True)) == {
        "user",
        "customer",
    }
    assert announcement_mark_read(user=recipient, announcement_id=both.pk) is False
    assert announcement_mark_unread(user=recipient, announcement_id=both.pk) is True
    assert not AnnouncementRead.objects.exists()
