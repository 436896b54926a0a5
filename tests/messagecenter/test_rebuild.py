import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction

from core.redis import get_redis, keyspace_flush
from messagecenter import keys as mc_keys
from messagecenter import services
from messagecenter.selectors import inbox_counts, inbox_list
from tests.messagecenter.conftest import make_group, send

pytestmark = pytest.mark.django_db(transaction=True)


def test_rebuild_restores_the_inbox_from_postgres(
    operator: Any, recipient: Any, other_recipient: Any, clock: Any, settings: Any
) -> None:
    settings.MESSAGECENTER_PUSH_THRESHOLD = 1
    group = make_group("vip", recipient)
    services.bulletin_create(title="B", body_html="", display_time=clock.now, group_ids=[group.pk])
    push = send(operator, to={"users": [recipient]})
    send(operator, to={"users": [recipient, other_recipient]})  # pull
    send(operator, to={"everyone": True})
    retracted = send(operator, to={"users": [recipient]})
    services.message_retract(message=retracted)
    services.inbox_hide(user=recipient, item_id=f"m{push.pk}")
    before = [i.id for i in inbox_list(user=recipient).results]
    assert len(before) == 3
    keyspace_flush()
    assert inbox_list(user=recipient).results == []
    call_command("messagecenter_rebuild", "--warm", stdout=StringIO())
    call_command("messagecenter_rebuild", "--warm", stdout=StringIO())  # idempotent
    assert [i.id for i in inbox_list(user=recipient).results] == before
    assert inbox_counts(user=recipient)["unread"] == 3


def test_the_rebuild_restores_what_users_share_and_fills_only_the_users_named(
    operator: Any, recipient: Any, other_recipient: Any
) -> None:
    send(operator, to={"users": [recipient, other_recipient]})
    keyspace_flush()
    out = StringIO()
    call_command("messagecenter_rebuild", f"--users={recipient.pk}", stdout=out)
    assert "users_filled: 1" in out.getvalue()
    assert get_redis().hexists(mc_keys.inbox_state(recipient.pk), "fill")
    assert not get_redis().exists(mc_keys.inbox(other_recipient.pk))
    assert len(inbox_list(user=recipient).results) == 1


def test_users_that_are_not_ids_are_refused_and_nothing_runs(recipient: Any) -> None:
    with pytest.raises(CommandError, match="user ids"):
        call_command("messagecenter_rebuild", "--users=1,two", stdout=StringIO())


def test_details_come_back_with_the_rebuild_for_pull_messages_and_with_fills_for_pushed_items(
    operator: Any, recipient: Any, other_recipient: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rebuild restores what everyone shares: the detail of a pull message.
    A pushed message's or a notification's detail comes back with the fill of
    a recipient who returns, a batch per call, a chunk of messages (and their
    image files) per query, exactly as published; a retracted one stays out."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    from messagecenter.fill import inbox_fill
    from messagecenter.items import message_detail, notification_detail
    from messagecenter.models import Message, Notification
    from messagecenter.readmodel import publish
    from messagecenter.services import rebuild as rebuild_service

    monkeypatch.setattr(publish, "DETAILS_BATCH", 2)
    monkeypatch.setattr(publish, "DETAILS_CHECK_BATCH", 2)
    monkeypatch.setattr(rebuild_service, "BATCH", 2)
    uploads = [SimpleUploadedFile("p.png", b"\x89PNG\r\n", content_type="image/png")]
    pictured = services.message_send(
        sender=operator,
        category="system",
        title="Pictures",
        body_html="<p>x</p>",
        image_files=uploads,
        user_ids=[recipient.pk],
    )
    pushed = [send(operator, to={"users": [recipient]}, title=f"Push {i}") for i in range(4)]
    elsewhere = send(operator, to={"users": [other_recipient]}, title="Someone else's")
    pulled = [send(operator, to={"everyone": True}, title=f"Everyone {i}") for i in range(3)]
    retracted = send(operator, to={"users": [recipient]}, title="Gone")
    services.message_retract(message=retracted)
    services.message_type_create(code="stock", name="Stock")
    services.subscription_create(message_type="stock", scope="WH1", user_id=recipient.pk)
    services.notification_send(message_type="stock", scope="WH1", title="Low", body_html="<p>x</p>")
    client = get_redis()
    details = client.hgetall(mc_keys.item_detail())
    assert len(details) == 10
    keyspace_flush()

    result = rebuild_service.inbox_rebuild()
    assert result["pull_messages"] == 3
    assert set(client.hkeys(mc_keys.item_detail())) == {m.ref.encode() for m in pulled}
    assert inbox_fill(user_id=recipient.pk)
    assert client.hgetall(mc_keys.item_detail()) == {k: v for k, v in details.items() if k != elsewhere.ref.encode()}
    for message in Message.objects.filter(pk__in=[pictured.pk, *[m.pk for m in pulled], *[m.pk for m in pushed]]):
        assert json.loads(details[message.ref.encode()]) == message_detail(message)
    notification = Notification.objects.get()
    assert json.loads(details[notification.ref.encode()]) == notification_detail(notification)
    assert json.loads(details[pictured.ref.encode()])["images"]
    assert {i.id for i in inbox_list(user=recipient, limit=50).results} == {
        m.ref for m in (pictured, *pushed, *pulled, notification)
    }


@pytest.mark.parametrize("change", ["edited", "retracted"])
def test_a_fill_does_not_bring_back_a_detail_changed_after_it_read_postgres(
    operator: Any, recipient: Any, change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fill read a message from PostgreSQL, then the operator edited or
    retracted it before the fill wrote its detail: the edit's newer detail
    stays, and the retracted message gets none (and is not in the inbox)."""
    from messagecenter import fill
    from messagecenter.models import Message

    message = send(operator, to={"users": [recipient]}, title="before")
    keyspace_flush()
    read = fill.details_of_refs

    def read_then_change(refs: Any) -> Any:
        shown = read(refs)
        if change == "edited":
            with transaction.atomic():  # its projection runs on commit
                edited = Message.objects.get(pk=message.pk)
                edited.title = "after"
                edited.save()
        else:
            services.message_retract(message=Message.objects.get(pk=message.pk))
        return shown

    monkeypatch.setattr(fill, "details_of_refs", read_then_change)
    assert fill.inbox_fill(user_id=recipient.pk)
    stored = get_redis().hget(mc_keys.item_detail(), message.ref)
    if change == "edited":
        assert json.loads(stored)["title"] == "after"
        assert [i.title for i in inbox_list(user=recipient).results] == ["after"]
    else:
        assert stored is None
        assert inbox_list(user=recipient).results == []
