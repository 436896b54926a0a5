from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from core.redis import keyspace_flush
from messagecenter import services
from messagecenter.selectors import inbox_counts, inbox_list
from tests.messagecenter.conftest import make_group, send

pytestmark = pytest.mark.django_db


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
    call_command("messagecenter_rebuild", stdout=StringIO())
    call_command("messagecenter_rebuild", stdout=StringIO())  # idempotent
    assert [i.id for i in inbox_list(user=recipient).results] == before
    assert inbox_counts(user=recipient)["unread"] == 3
