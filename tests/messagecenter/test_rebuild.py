import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

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


def test_the_rebuild_restores_every_live_detail_in_batches(
    operator: Any, recipient: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Details go back a batch per call, a chunk of messages (and their image
    files) per query: with batches of two, five push messages, one with
    uploaded images, come back exactly as published, the pull message too;
    a retracted one stays out."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    from messagecenter.items import message_detail, notification_detail
    from messagecenter.models import Message, Notification
    from messagecenter.readmodel import publish
    from messagecenter.services import rebuild as rebuild_service

    monkeypatch.setattr(publish, "DETAILS_BATCH", 2)
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
    pulled = send(operator, to={"everyone": True}, title="Everyone")
    retracted = send(operator, to={"users": [recipient]}, title="Gone")
    services.message_retract(message=retracted)
    services.message_type_create(code="stock", name="Stock")
    services.subscription_create(message_type="stock", scope="WH1", user_id=recipient.pk)
    services.notification_send(message_type="stock", scope="WH1", title="Low", body_html="<p>x</p>")
    client = get_redis()
    details = client.hgetall(mc_keys.item_detail())
    assert len(details) == 7
    keyspace_flush()
    result = rebuild_service.inbox_rebuild()
    assert result["messages"] == 6
    assert result["notifications"] == 1
    assert client.hgetall(mc_keys.item_detail()) == details
    for message in Message.objects.filter(pk__in=[pictured.pk, pulled.pk, *[m.pk for m in pushed]]):
        assert json.loads(details[message.ref.encode()]) == message_detail(message)
    notification = Notification.objects.get()
    assert json.loads(details[notification.ref.encode()]) == notification_detail(notification)
    assert json.loads(details[pictured.ref.encode()])["images"]
