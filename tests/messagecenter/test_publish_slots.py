"""Bitmap slot allocation on the publish path: one statement, race-free, bounded."""

import threading
from datetime import UTC, datetime

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from core.api.errors import LimitExceeded
from messagecenter.models import ItemSlotMonth
from messagecenter.services import slots
from messagecenter.services.slots import MAX_BIT_OFFSET, slot_allocate

pytestmark = pytest.mark.django_db(transaction=True)

AT = datetime(2031, 5, 17, 9, 30, tzinfo=UTC)
MONTH = 203105


def test_sql_names_the_models_table_and_columns() -> None:
    # The statement is plain SQL; it must follow the model if it is renamed.
    meta = ItemSlotMonth._meta
    assert f"INTO {meta.db_table} (month, next_offset)" in slots._ALLOCATE_SQL
    assert meta.pk is not None
    assert meta.pk.column == "month"
    assert meta.get_field("next_offset").column == "next_offset"


def test_offsets_are_dense_per_month_from_zero() -> None:
    assert [slot_allocate(at=AT) for _ in range(3)] == [(MONTH, 0), (MONTH, 1), (MONTH, 2)]
    assert slot_allocate(at=datetime(2031, 6, 1, tzinfo=UTC)) == (203106, 0)
    assert ItemSlotMonth.objects.get(month=MONTH).next_offset == 3


def test_one_statement_without_savepoints() -> None:
    slot_allocate(at=AT)
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        slot_allocate(at=AT)
    statements = [q["sql"] for q in queries.captured_queries]
    assert len([s for s in statements if "itemslotmonth" in s]) == 1
    assert not [s for s in statements if "SAVEPOINT" in s]


def test_a_rolled_back_allocation_is_handed_out_again() -> None:
    slot_allocate(at=AT)

    def failed_send() -> None:
        with transaction.atomic():
            assert slot_allocate(at=AT) == (MONTH, 1)
            raise RuntimeError("the send failed")

    with pytest.raises(RuntimeError):
        failed_send()
    assert slot_allocate(at=AT) == (MONTH, 1)


def test_the_last_offset_is_given_then_refused_without_a_change() -> None:
    ItemSlotMonth.objects.create(month=MONTH, next_offset=MAX_BIT_OFFSET)
    assert slot_allocate(at=AT) == (MONTH, MAX_BIT_OFFSET)
    with pytest.raises(LimitExceeded):
        slot_allocate(at=AT)
    with pytest.raises(LimitExceeded):
        slot_allocate(at=AT)
    assert ItemSlotMonth.objects.get(month=MONTH).next_offset == MAX_BIT_OFFSET + 1


@pytest.mark.postgres
@pytest.mark.parametrize("month_exists", [False, True], ids=["first-of-month", "existing-month"])
def test_concurrent_senders_never_share_a_slot(month_exists: bool) -> None:
    """Threads on their own connections allocate inside transactions that
    stay open a little while (as a send does): the row lock serialises them,
    and the first insert of a month races through ON CONFLICT."""
    if month_exists:
        ItemSlotMonth.objects.create(month=MONTH, next_offset=0)
    threads, per_thread = 6, 8
    barrier = threading.Barrier(threads)
    got: list[tuple[int, int]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def sender() -> None:
        try:
            barrier.wait()
            for _ in range(per_thread):
                with transaction.atomic():
                    slot = slot_allocate(at=AT)
                    # Hold the transaction open: a second sender must wait, not reuse.
                    with connection.cursor() as cursor:
                        cursor.execute("SELECT pg_sleep(0.002)")
                with lock:
                    got.append(slot)
        except BaseException as error:  # reported below
            errors.append(error)
        finally:
            connections.close_all()

    workers = [threading.Thread(target=sender) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert not errors, errors
    offsets = sorted(offset for _, offset in got)
    assert {month for month, _ in got} == {MONTH}
    assert offsets == list(range(threads * per_thread))  # unique and dense
    assert ItemSlotMonth.objects.get(month=MONTH).next_offset == threads * per_thread


@pytest.mark.postgres
def test_concurrent_transactions_that_roll_back_leave_no_duplicate() -> None:
    """Half the sends roll back after allocating: their increment goes with
    them, so the committed offsets are unique and still dense."""
    threads = 6
    barrier = threading.Barrier(threads)
    committed: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def sender(index: int) -> None:
        try:
            barrier.wait()
            for round_ in range(5):
                try:
                    with transaction.atomic():
                        _, offset = slot_allocate(at=AT)
                        if (index + round_) % 2:
                            raise KeyError("roll back")
                    with lock:
                        committed.append(offset)
                except KeyError:
                    pass
        except BaseException as error:  # reported below
            errors.append(error)
        finally:
            connections.close_all()

    workers = [threading.Thread(target=sender, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert not errors, errors
    assert sorted(committed) == list(range(len(committed)))
    assert ItemSlotMonth.objects.get(month=MONTH).next_offset == len(committed)
