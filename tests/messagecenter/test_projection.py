"""messagecenter.projection through its receivers: one run per commit, saves
that change nothing skipped, changes made in the shell reach Redis too."""

from typing import Any
from unittest import mock

import pytest
from django.db import transaction

from messagecenter import projection, services
from messagecenter.models import Bulletin, UserGroupMembership
from messagecenter.readmodel import drift as rm
from messagecenter.readmodel import publish
from messagecenter.services.slots import slot_allocate
from tests.conftest import client_for
from tests.messagecenter.conftest import ids, make_group, send
from tests.messagecenter.readmodel_views import user_groups_get

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_publish_is_one_write_without_an_edit(recipient: Any, clock: Any) -> None:
    vip = make_group("vip", recipient)
    with mock.patch.object(publish, "bulletin_put", wraps=publish.bulletin_put) as put:
        bulletin = services.bulletin_create(title="t", body_html="<p>b</p>", display_time=clock.now, group_ids=[vip.pk])
    assert [(c.kwargs["bulletin_id"], c.kwargs["group_ids"], c.kwargs["edit"]) for c in put.call_args_list] == [
        (bulletin.pk, [vip.pk], False)
    ]


def test_a_save_that_changes_nothing_shown_writes_nothing(clock: Any) -> None:
    bulletin = services.bulletin_create(title="t", body_html="<p>b</p>", display_time=clock.now)
    loaded = Bulletin.objects.get(pk=bulletin.pk)
    with mock.patch.object(publish, "bulletin_put") as put:
        loaded.save()
        assert put.call_count == 0
        loaded.title = "changed"
        loaded.save()
        assert put.call_count == 1


def test_a_bulletin_made_in_the_shell_reaches_its_group(recipient: Any, other_recipient: Any, clock: Any) -> None:
    vip = make_group("vip", recipient)
    with transaction.atomic():
        month, offset = slot_allocate(at=clock.now)
        bulletin = Bulletin.objects.create(
            title="shell", body_html="<p>b</p>", display_time=clock.now, slot_month=month, slot_offset=offset
        )
        bulletin.groups.add(vip)
    assert f"b{bulletin.pk}" in ids_of(recipient)
    assert f"b{bulletin.pk}" not in ids_of(other_recipient)


def test_membership_rows_in_one_transaction_are_one_run(recipient: Any, other_recipient: Any) -> None:
    vip = make_group("vip")
    with mock.patch.object(projection, "user_groups", wraps=projection.user_groups) as run, transaction.atomic():
        UserGroupMembership.objects.create(group=vip, user=recipient)
        vip.members.add(other_recipient)
        recipient.message_groups.remove(vip)
    assert [sorted(c.args[0]) for c in run.call_args_list] == [[recipient.pk, other_recipient.pk]]
    assert user_groups_get(user_ids=[recipient.pk, other_recipient.pk]) == {
        recipient.pk: set(),
        other_recipient.pk: {vip.pk},
    }


def test_a_message_edited_in_the_shell_shows_the_edit(operator: Any, recipient: Any) -> None:
    message = send(operator, to={"users": [recipient]}, title="before")
    message.title = "after"
    message.save()
    detail = rm.item_details_get(refs=[message.ref])[message.ref]
    assert detail is not None
    assert detail["title"] == "after"


def ids_of(user: Any) -> list[str]:
    return ids(client_for(user).get("/api/v1/inbox/"))
