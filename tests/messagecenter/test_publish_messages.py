"""message_send's publish path: few statements, no reload of what it just
wrote, and the same inbox whatever the transaction does around it."""

from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from redis.exceptions import ConnectionError as RedisConnectionError

from core.api.errors import ValidationFailed
from messagecenter import keys as mc_keys
from messagecenter import services, tasks
from messagecenter.models import ItemSlotMonth, Message, MessageImage, MessageStatus, PendingDelivery
from messagecenter.selectors import inbox_item_get
from messagecenter.services import delivery
from messagecenter.services import messages as messages_module
from tests.conftest import client_for
from tests.messagecenter.conftest import ids

pytestmark = pytest.mark.django_db(transaction=True)


def everyone(operator: Any, **extra: Any) -> Message:
    fields = {"category": "system", "title": "Hello", "body_html": "<p>Hi</p>", **extra}
    return services.message_send(sender=operator, everyone=True, **fields)


def test_everyone_message_is_published_in_few_statements(operator: Any, recipient: Any, redis: Any) -> None:
    everyone(operator)  # the month's slot row exists from here on, as in steady state
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        message = everyone(operator, title="Second")
    statements = [q["sql"] for q in queries.captured_queries]
    # BEGIN, the slot, the row, its pending delivery, the webhook endpoints
    # that take the event, COMMIT, then the delivery's status update and the
    # DELETE of the pending delivery.
    assert len(statements) <= 8, statements
    assert not [s for s in statements if "SAVEPOINT" in s]
    # Nothing it has just written is read back: not the row, not its images.
    # The one read is the webhook endpoints lookup: nothing written is read back.
    reads = [s for s in statements if s.startswith("SELECT")]
    assert len(reads) == 1
    assert "core_webhookendpoint" in reads[0], statements
    assert Message.objects.get(pk=message.pk).status == MessageStatus.DELIVERED
    assert redis.zcard(mc_keys.pull()) == 2
    assert ids(client_for(recipient).get("/api/v1/inbox/")) == [f"m{message.pk}", f"m{message.pk - 1}"]
    assert inbox_item_get(user=recipient, item_id=f"m{message.pk}").title == "Second"


@pytest.mark.parametrize("audience", ["everyone", "users"])
def test_uploaded_images_are_in_the_published_detail(operator: Any, recipient: Any, audience: str, clock: Any) -> None:
    uploads = [SimpleUploadedFile(f"p{i}.png", b"\x89PNG\r\n", content_type="image/png") for i in range(2)]
    to: dict[str, Any] = {"everyone": True} if audience == "everyone" else {"user_ids": [recipient.pk]}
    message = services.message_send(
        sender=operator,
        category="system",
        title="Pictures",
        body_html="<p>x</p>",
        images=["https://cdn.test/a.png"],
        image_files=uploads,
        **to,
    )
    stored = [image.file.url for image in MessageImage.objects.filter(message=message).order_by("position")]
    assert len(stored) == 2
    assert inbox_item_get(user=recipient, item_id=f"m{message.pk}").images == ["https://cdn.test/a.png", *stored]


def test_later_changes_in_the_same_transaction_win(operator: Any, recipient: Any, clock: Any) -> None:
    with transaction.atomic():
        message = everyone(operator, title="Draft")
        stored = Message.objects.get(pk=message.pk)
        stored.title = "Final"
        stored.save()
    assert inbox_item_get(user=recipient, item_id=f"m{message.pk}").title == "Final"


def test_retracted_in_the_same_transaction_reaches_nobody(operator: Any, recipient: Any, redis: Any) -> None:
    with transaction.atomic():
        message = everyone(operator)
        assert services.message_retract(message=Message.objects.get(pk=message.pk))
    assert Message.objects.get(pk=message.pk).status == MessageStatus.RETRACTED
    assert client_for(recipient).get("/api/v1/inbox/").json()["results"] == []
    assert client_for(recipient).get(f"/api/v1/inbox/m{message.pk}/").status_code == 404
    assert redis.zcard(mc_keys.pull()) == 0


def test_deleted_in_the_same_transaction_leaves_nothing(operator: Any, recipient: Any, redis: Any) -> None:
    with transaction.atomic():
        message = everyone(operator)
        Message.objects.filter(pk=message.pk).delete()
    assert client_for(recipient).get("/api/v1/inbox/").json()["results"] == []
    assert redis.zcard(mc_keys.pull()) == 0
    assert not redis.hexists(mc_keys.item_detail(), f"m{message.pk}")


def test_a_failed_send_writes_nothing(operator: Any, recipient: Any, redis: Any, monkeypatch: Any) -> None:
    everyone(operator)
    before = ItemSlotMonth.objects.get().next_offset

    def broken_storage(**kwargs: Any) -> Any:
        raise OSError("disk full")

    monkeypatch.setattr(MessageImage.objects, "create", broken_storage)
    upload = SimpleUploadedFile("p.png", b"\x89PNG\r\n", content_type="image/png")
    with pytest.raises(OSError, match="disk full"):
        everyone(operator, title="Broken", image_files=[upload])
    assert list(Message.objects.values_list("title", flat=True)) == ["Hello"]
    assert ItemSlotMonth.objects.get().next_offset == before  # the slot went back with the rollback
    assert redis.zcard(mc_keys.pull()) == 1


def test_a_failed_send_inside_a_transaction_rolls_all_of_it_back(
    operator: Any, recipient: Any, redis: Any, monkeypatch: Any
) -> None:
    # No savepoint of its own: an error in the writes aborts the caller's
    # transaction (there is no half-done send to keep either way).
    def broken_storage(**kwargs: Any) -> Any:
        raise OSError("disk full")

    monkeypatch.setattr(MessageImage.objects, "create", broken_storage)
    upload = SimpleUploadedFile("p.png", b"\x89PNG\r\n", content_type="image/png")

    def caller() -> None:
        with transaction.atomic():
            everyone(operator, title="Fine")
            try:
                everyone(operator, title="Broken", image_files=[upload])
            except OSError:
                pass

    caller()
    assert not Message.objects.exists()
    assert redis.zcard(mc_keys.pull()) == 0


def test_a_validation_error_leaves_the_callers_transaction_usable(operator: Any, recipient: Any) -> None:
    with transaction.atomic():
        first = everyone(operator, title="Kept")
        with pytest.raises(ValidationFailed):
            services.message_send(sender=operator, category="nope", title="x", body_html="", everyone=True)
        assert Message.objects.filter(pk=first.pk).exists()
    assert ids(client_for(recipient).get("/api/v1/inbox/")) == [f"m{first.pk}"]


def test_redis_failing_at_delivery_falls_back_to_the_task(
    operator: Any, recipient: Any, redis: Any, monkeypatch: Any
) -> None:
    real = messages_module.message_deliver
    calls: list[int] = []

    def flaky(*, message: Message, **kwargs: Any) -> int:
        calls.append(message.pk)
        if len(calls) == 1:
            raise RedisConnectionError("connection reset")
        return real(message=message, **kwargs)

    monkeypatch.setattr(messages_module, "message_deliver", flaky)
    retried: list[int] = []
    real_apply_async = tasks.message_deliver_task.apply_async

    def apply_async(args: list[int], **options: Any) -> Any:
        retried.append(args[0])
        return real_apply_async(args=args, **options)

    monkeypatch.setattr(tasks.message_deliver_task, "apply_async", apply_async)
    message = everyone(operator)
    assert calls == [message.pk, message.pk]  # the task reloads and calls the service again
    assert retried == [message.pk]
    assert Message.objects.get(pk=message.pk).status == MessageStatus.DELIVERED
    assert ids(client_for(recipient).get("/api/v1/inbox/")) == [f"m{message.pk}"]


def test_with_a_broker_the_task_is_enqueued_after_commit(operator: Any, monkeypatch: Any, redis: Any) -> None:
    task = tasks.message_deliver_task
    queued: list[int] = []

    def apply_async(args: list[int], **options: Any) -> None:
        queued.append(args[0])

    monkeypatch.setattr(task, "apply_async", apply_async)
    eager = task.app.conf.task_always_eager
    task.app.conf.task_always_eager = False
    try:
        with transaction.atomic():
            message = everyone(operator)
            assert queued == []
    finally:
        task.app.conf.task_always_eager = eager
    assert queued == [message.pk]
    assert Message.objects.get(pk=message.pk).status == MessageStatus.QUEUED
    assert redis.zcard(mc_keys.pull()) == 0


@pytest.mark.postgres
def test_the_pull_status_write_waits_for_no_flush_and_leaves_the_session_as_it_was(operator: Any) -> None:
    # Committed for real (the module is transactional): the delivery runs in autocommit.
    message = everyone(operator)
    assert Message.objects.get(pk=message.pk).status == MessageStatus.DELIVERED
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "on"  # set_config(..., true) ended with that statement's transaction
    # Only a queued row moves: a rerun, or a retraction that went first, is told apart.
    assert messages_module._mark_pulled_delivered(message) is False
    Message.objects.filter(pk=message.pk).update(status=MessageStatus.RETRACTED)
    assert messages_module._mark_pulled_delivered(message) is False
    assert Message.objects.get(pk=message.pk).status == MessageStatus.RETRACTED
    Message.objects.filter(pk=message.pk).update(status=MessageStatus.QUEUED)
    with CaptureQueriesContext(connection) as queries:
        assert messages_module._mark_pulled_delivered(message) is True
    assert len(queries.captured_queries) == 1
    assert "synchronous_commit" in queries.captured_queries[0]["sql"]
    assert Message.objects.get(pk=message.pk).status == MessageStatus.DELIVERED


@pytest.mark.postgres
def test_a_pull_delivery_ends_with_one_statement_for_its_status_and_its_pending_row(operator: Any) -> None:
    with CaptureQueriesContext(connection) as queries:
        message = everyone(operator)
    deletes = [q["sql"] for q in queries.captured_queries if q["sql"].lstrip().startswith(("DELETE", "WITH"))]
    assert len(deletes) == 1, deletes
    assert "DELETE FROM" in deletes[0]
    assert "UPDATE" in deletes[0]
    assert "synchronous_commit" in deletes[0]
    assert Message.objects.get(pk=message.pk).status == MessageStatus.DELIVERED
    assert not PendingDelivery.objects.exists()
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "on"


@pytest.mark.postgres
def test_a_done_row_is_deleted_without_waiting_for_a_flush_only_in_autocommit(operator: Any) -> None:
    def row() -> PendingDelivery:
        return PendingDelivery.objects.create(
            task="messagecenter.message_deliver", object_id=987654, index=0, due_at=timezone.now()
        )

    row()
    with CaptureQueriesContext(connection) as queries:
        delivery._done("messagecenter.message_deliver", 987654, 0)
    assert [q["sql"] for q in queries.captured_queries if "synchronous_commit" in q["sql"]]
    assert not PendingDelivery.objects.filter(object_id=987654).exists()
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "on"
    # Inside a caller's transaction the setting would outlive the statement: a plain DELETE.
    with transaction.atomic():
        row()
        with CaptureQueriesContext(connection) as queries:
            delivery._done("messagecenter.message_deliver", 987654, 0)
        assert not [q["sql"] for q in queries.captured_queries if "synchronous_commit" in q["sql"]]
        with connection.cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            assert cursor.fetchone()[0] == "on"
    assert not PendingDelivery.objects.filter(object_id=987654).exists()
