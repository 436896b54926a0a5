"""A user's month bit-sets (push, read, ever-read) cost what the user's own
items need: a set of offsets while sparse, a bitmap once dense
(messagecenter/lua/_bits.lua, messagecenter/readmodel/bits.py).

Offsets are the item's place among every item of the month, so a user with 5
items in a month of a million would pay a 122 KiB bitmap per key; here all of
that user's keys stay within 4 KB (MEMORY USAGE on a real Redis; the embedded
fake server has no MEMORY command, so there the forms and sizes of the keys
are held instead). The switch to a bitmap keeps every answer, and the
restore and first-read paths read and write both forms.
"""

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db.models import F
from pyroaring import BitMap
from redis.exceptions import ResponseError

from core import keys
from core.redis import keyspace_flush
from messagecenter import insight, selectors, services
from messagecenter import keys as mc_keys
from messagecenter.models import InboxReadMonth, ItemSlotMonth, Message
from messagecenter.readmodel import InboxEntry, bits, inbox, publish
from tests.conftest import client_for
from tests.factories import UserFactory
from tests.fixtures.readmodel import keyspace_scan
from tests.messagecenter.conftest import send

pytestmark = pytest.mark.django_db(transaction=True)

MONTH = 202611
SCORE = 1_790_000_000_000
NOW = SCORE + 10_000_000  # after every item of these tests


def _others_took(month: int, offsets: int) -> None:
    """Items of other users took ``offsets`` slots of the month."""
    ItemSlotMonth.objects.get_or_create(month=month)
    ItemSlotMonth.objects.filter(month=month).update(next_offset=F("next_offset") + offsets)


def _bit_keys(user_id: int, month: int | str) -> tuple[str, str, str]:
    return (
        mc_keys.push_bitmap(user_id, month),
        mc_keys.read_bitmap(user_id, month),
        mc_keys.read_ever_bitmap(user_id, month),
    )


def _user_keys(redis: Any, user_id: int) -> list[str]:
    return sorted(k.decode() for k in keyspace_scan(redis, match=f"*{{u{user_id}}}*"))


def _memory_usage(redis: Any, names: list[str]) -> dict[str, int] | None:
    """MEMORY USAGE of each key (samples=0: exact), or None on the embedded
    fake server, which has no MEMORY command."""
    try:
        return {name: int(redis.memory_usage(name, samples=0) or 0) for name in names}
    except ResponseError as error:
        if "unknown command" not in str(error):
            raise
        return None


def test_a_user_with_five_items_in_a_month_of_a_million_costs_at_most_4_kb(
    operator: Any, recipient: Any, clock: Any, redis: Any
) -> None:
    messages: list[Any] = []
    for i in range(5):
        if i:
            _others_took(messages[0].slot_month, 250_000 - 1)
            clock.advance(seconds=1)  # one item a second: the page's order is theirs
        messages.append(send(operator, to={"users": [recipient]}, title=f"t{i}"))
    month = messages[0].slot_month
    assert [m.slot_month for m in messages] == [month] * 5
    assert messages[-1].slot_offset >= 1_000_000
    alice = client_for(recipient)
    # What a user does: reads pages and counts (cached), marks one, reads all,
    # archives one, snoozes one, marks everything seen.
    assert len(alice.get("/api/v1/inbox/").json()["results"]) == 5
    alice.get("/api/v1/inbox/counts/")
    assert services.inbox_mark_read(user=recipient, item_id=messages[0].ref) is True
    assert services.inbox_mark_all_read(user=recipient) == 4
    services.inbox_archive(user=recipient, item_id=messages[1].ref)
    services.inbox_snooze(user=recipient, item_id=messages[2].ref, until=clock.now + timedelta(hours=1))
    services.inbox_mark_seen(user=recipient)
    page = alice.get("/api/v1/inbox/").json()
    assert [(r["id"], r["read"]) for r in page["results"]] == [
        (m.ref, True) for m in (messages[4], messages[3], messages[0])
    ]
    alice.get("/api/v1/inbox/counts/")

    # Every bit-set is a set of the user's offsets, not a bitmap of the month.
    push, read, ever = _bit_keys(recipient.pk, month)
    assert redis.type(push) == b"set"
    assert {int(o) for o in redis.smembers(read)} == {m.slot_offset for m in messages} - {messages[2].slot_offset}
    assert {int(o) for o in redis.smembers(ever)} == {m.slot_offset for m in messages}
    # First reads of the sparse month were counted once each (read_all's offsets form).
    assert insight.message_read_counts(messages=messages) == {m.pk: 1 for m in messages}
    names = _user_keys(redis, recipient.pk)
    assert push in names
    assert read in names
    assert ever in names
    for name in names:  # no key of this user grew with the month
        kind = redis.type(name)
        if kind == b"string":
            assert redis.strlen(name) <= 256, name
        elif kind == b"set":
            assert redis.scard(name) <= 5, name
    sizes = _memory_usage(redis, names)
    if sizes is not None:
        assert sum(sizes.values()) <= 4096, sizes


def _deliver(user_ids: list[int], offsets: list[int]) -> list[InboxEntry]:
    """One pushed item per offset (the ref and time follow the offset), each
    placed in the users' inboxes (push bits included) by their next read."""
    entries = [
        InboxEntry(ref=f"m{9000 + o}", category="system", month=MONTH, offset=o, score=SCORE + o, expire_ms=0)
        for o in offsets
    ]
    for entry in entries:
        publish.item_detail_put(ref=entry.ref, detail={"title": entry.ref, "category": "system"})
        publish.inbox_deliver(entry=entry, user_ids=user_ids, now_ms=SCORE)
    for user_id in user_ids:
        inbox.inbox_counts(user_id=user_id, now_ms=SCORE)
    return entries


def _read_flags(user_id: int) -> dict[str, bool]:
    rows: dict[str, bool] = {}
    position: tuple[int, int] | None = None
    while True:
        max_score, skip = position or (None, 0)
        page = inbox.inbox_page(
            user_id=user_id,
            now_ms=NOW + 10_000,
            category=None,
            max_score=max_score,
            skip=skip,
            limit=200,
            unread_only=False,
            since_ms=None,
        )
        assert isinstance(page, inbox.Page)
        rows.update((row.ref, row.read) for row in page.rows)
        if page.next_position is None:
            return rows
        position = page.next_position


def test_a_dense_month_is_a_bitmap_from_its_second_item(redis: Any) -> None:
    user = UserFactory()
    _deliver([user.pk], [0])
    push = mc_keys.push_bitmap(user.pk, MONTH)
    assert redis.type(push) == b"string"  # offset 0: one byte of bitmap beats a set
    _deliver([user.pk], list(range(1, 2000)))
    assert redis.type(push) == b"string"
    assert redis.strlen(push) == 250  # 2,000 items: 0.125 byte each
    assert inbox.inbox_counts(user_id=user.pk, now_ms=NOW + 1).unread == 2000


@pytest.mark.parametrize("gap", [20, 1_000])
def test_the_switch_to_a_bitmap_keeps_every_answer(redis: Any, gap: int) -> None:
    """Sparse offsets: a set until the bitmap is smaller (gap 20: 2.5 bytes an
    item against 4, from about 85 items on) or the set would pass 512 offsets
    (gap 1,000); marks made before the switch survive it, and pages, counts,
    unread and mark-all agree."""
    user, other = UserFactory(), UserFactory()
    offsets = [1_000 + gap * i for i in range(600)]
    entries = _deliver([user.pk, other.pk], offsets[:5])
    read_key = mc_keys.read_bitmap(user.pk, MONTH)
    push = mc_keys.push_bitmap(user.pk, MONTH)
    assert redis.type(push) == b"set"
    marked = [e.member for e in entries[:3]]
    assert inbox.inbox_mark_many(user_id=user.pk, members=marked, read=True, now_ms=NOW + 1) == 3
    assert redis.type(read_key) == b"set"
    entries += _deliver([user.pk, other.pk], offsets[5:80])
    assert redis.type(push) == b"set"
    entries += _deliver([user.pk, other.pk], offsets[80:500])
    assert redis.type(push) == (b"string" if gap == 20 else b"set")
    entries += _deliver([user.pk, other.pk], offsets[500:])
    assert redis.type(push) == b"string"
    assert redis.type(read_key) == b"set"  # only 3 read: still small
    flags = _read_flags(user.pk)
    assert flags == {e.ref: e.member in marked for e in entries}
    assert inbox.inbox_counts(user_id=user.pk, now_ms=NOW + 2).unread == 597
    # Reads across the switch of the read key too.
    more = [e.member for e in entries[::2]]
    inbox.inbox_mark_many(user_id=user.pk, members=more, read=True, now_ms=NOW + 3)
    assert redis.type(read_key) == b"set"  # one read in 40 or 2,000 offsets: sparse
    expected = {e.ref: e.member in marked or e.member in more for e in entries}
    assert _read_flags(user.pk) == expected
    unread = sum(not v for v in expected.values())
    assert inbox.inbox_counts(user_id=user.pk, now_ms=NOW + 4).unread == unread
    assert inbox.inbox_read_all(user_id=user.pk, category=None, now_ms=NOW + 5) == unread
    assert all(_read_flags(user.pk).values())
    assert redis.type(read_key) == b"string"  # read |= push: the push bitmap's form
    assert inbox.inbox_counts(user_id=user.pk, now_ms=NOW + 6).unread == 0
    # The other inbox took the same items and stays untouched by those marks.
    assert not any(_read_flags(other.pk).values())
    assert inbox.inbox_counts(user_id=other.pk, now_ms=NOW + 6).unread == 600


def test_read_state_and_restore_keep_the_compact_form(operator: Any, recipient: Any, clock: Any, redis: Any) -> None:
    """The marks commit the offsets to PostgreSQL; the rebuild writes a sparse
    month back as a set (not the month's bitmap) and a dense one as a bitmap."""
    dense_user = UserFactory()  # the month's first 20 items
    dense = [send(operator, to={"users": [dense_user]}, title=f"d{i}") for i in range(20)]
    sparse = []
    for i in range(3):
        _others_took(dense[0].slot_month, 400_000)
        clock.advance(seconds=1)
        sparse.append(send(operator, to={"users": [recipient]}, title=f"s{i}"))
    month = sparse[0].slot_month
    services.inbox_mark_read(user=recipient, item_id=sparse[0].ref)
    services.inbox_mark_read(user=recipient, item_id=sparse[2].ref)
    services.inbox_mark_all_read(user=dense_user)
    services.inbox_mark_unread(user=dense_user, item_id=dense[3].ref)
    assert redis.type(mc_keys.read_bitmap(recipient.pk, month)) == b"set"
    snap = InboxReadMonth.objects.get(user=recipient, month=month)
    assert BitMap.deserialize(bytes(snap.read)) == BitMap([sparse[0].slot_offset, sparse[2].slot_offset])
    dense_snap = InboxReadMonth.objects.get(user=dense_user, month=month)
    assert BitMap.deserialize(bytes(dense_snap.read)) == BitMap(m.slot_offset for m in dense if m != dense[3])

    keyspace_flush()
    call_command("messagecenter_rebuild", "--warm", stdout=StringIO())
    assert redis.type(mc_keys.read_bitmap(recipient.pk, month)) == b"set"
    assert redis.type(mc_keys.read_ever_bitmap(recipient.pk, month)) == b"set"
    assert redis.type(mc_keys.read_bitmap(dense_user.pk, month)) == b"string"
    assert [(i.id, i.read) for i in selectors.inbox_list(user=recipient).results] == [
        (sparse[2].ref, True),
        (sparse[1].ref, False),
        (sparse[0].ref, True),
    ]
    assert selectors.inbox_counts(user=recipient)["unread"] == 1
    assert {i.id: i.read for i in selectors.inbox_list(user=dense_user, limit=50).results} == {
        m.ref: m != dense[3] for m in dense
    }
    # A mark after the restore is a first read only where the ever-read set says so.
    assert Message.objects.filter(pk=sparse[1].pk).exists()
    services.inbox_mark_read(user=recipient, item_id=sparse[1].ref)
    assert bits.read_many([mc_keys.read_bitmap(recipient.pk, month)])[0].offsets == frozenset(
        m.slot_offset for m in sparse
    )


def test_python_readers_take_either_form(redis: Any) -> None:
    names = [f"{keys.prefix()}bits-{n}{{u1}}" for n in "abc"]
    redis.delete(*names)
    redis.sadd(names[0], 5, 1_000_000)
    redis.setbit(names[1], 9, 1)
    a, b, c = bits.read_many(names)
    assert (5 in a, 1_000_000 in a, 6 in a) == (True, True, False)
    assert (9 in b, 8 in b, 10**9 in b) == (True, False, False)
    assert not c.exists
    assert 0 not in c
    assert list(a.to_bitmap()) == [5, 1_000_000]
    assert list(b.to_bitmap()) == [9]
    assert bits.encode(BitMap([5, 1_000_000])) == ("s", "5,1000000")
    assert bits.encode(BitMap(range(40))) == ("b", b"\xff" * 5)
    assert bits.encode(BitMap()) == ("b", b"")
    redis.delete(*names)


def _fill(user_id: int, offsets: list[int]) -> list[InboxEntry]:
    """One fill_items.lua call putting an item per offset into the user's inbox."""
    entries = [
        InboxEntry(ref=f"m{9000 + o}", category="system", month=MONTH, offset=o, score=SCORE + o, expire_ms=0)
        for o in offsets
    ]
    for entry in entries:
        publish.item_detail_put(ref=entry.ref, detail={"title": entry.ref, "category": "system"})
    (call,) = publish.fill_item_calls(user_id=user_id, entries=entries, now_ms=SCORE)
    assert call() == len(entries)
    return entries


@pytest.mark.parametrize("read_form", ["set", "string"])
def test_a_fill_sets_a_batch_of_bits_in_every_form(redis: Any, read_form: str) -> None:
    """A fill places its items a batch at a time (_bits_many.lua): the push key
    starts as a set, becomes a bitmap once dense, and a batch far past a small
    bitmap's end turns it back into a set; the read bits come from either form.
    Every item lands read or unread as its read bit says."""
    user = UserFactory()
    push, read_key, _ever = _bit_keys(user.pk, MONTH)
    read = {5, 40, 41} if read_form == "set" else set(range(0, 200, 3))
    if read_form == "set":
        redis.sadd(read_key, *read)
    else:
        for offset in read:
            redis.setbit(read_key, offset, 1)
    assert redis.type(read_key) == read_form.encode()
    entries = _fill(user.pk, [5, 700])
    assert redis.type(push) == b"set"  # 2 offsets: 8 bytes against a bitmap of 88
    entries += _fill(user.pk, list(range(0, 5)) + list(range(6, 60)))
    assert redis.type(push) == b"string"  # 60 dense offsets: their bitmap is the smaller
    assert {o for o in range(800) if redis.getbit(push, o)} == {e.offset for e in entries}
    entries += _fill(user.pk, list(range(60, 120)))
    assert redis.type(push) == b"string"  # inside the bitmap: one BITFIELD
    entries += _fill(user.pk, [900_000, 900_008])
    assert redis.type(push) == b"set"  # 123 offsets in a set beat a 112 KB bitmap
    assert {int(o) for o in redis.smembers(push)} == {e.offset for e in entries}
    flags = _read_flags(user.pk)
    assert flags == {e.ref: e.offset in read for e in entries}
    unread = sum(not read for read in flags.values())
    assert inbox.inbox_counts(user_id=user.pk, now_ms=NOW).unread == unread
