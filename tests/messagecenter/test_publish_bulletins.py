"""bulletin_create's publish path: Redis written from the bulletin at hand
after commit (no reload), unless the transaction changed it afterwards."""

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from redis.exceptions import ConnectionError as RedisConnectionError

from durability import outbox
from messagecenter import keys as mc_keys
from messagecenter import services
from messagecenter.items import bulletin_entry
from messagecenter.models import Bulletin
from messagecenter.readmodel import publish, to_ms
from messagecenter.selectors import inbox_item_get
from tests.conftest import client_for
from tests.messagecenter.conftest import ids, make_group

pytestmark = pytest.mark.django_db(transaction=True)


def config_members(redis: Any, bulletin: Bulletin) -> set[str]:
    members = {m.decode() for m in redis.zrange(mc_keys.bulletin_config(), 0, -1)}
    return {m for m in members if m.startswith(f"{bulletin.pk}_")}


def test_a_bulletin_for_everyone_is_published_in_few_statements(recipient: Any, redis: Any, clock: Any) -> None:
    # A minute earlier: on equal display times the inbox orders by member,
    # and "b100" sorts before "b99".
    services.bulletin_create(title="First", body_html="<p>x</p>", display_time=clock.now - timedelta(minutes=1))
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        bulletin = services.bulletin_create(title="News", body_html="<p>News</p>", display_time=clock.now)
    statements = [q["sql"] for q in queries.captured_queries]
    # BEGIN, the slot, the row, the record of the projection (in case the
    # process dies before it runs), the webhook endpoints that take the event
    # (none: nothing written for them), COMMIT; after commit the record's
    # DELETE. The groups are not set (none), and nothing is read back.
    assert len(statements) == 7, statements
    assert statements[-1].startswith("DELETE FROM core_outboxentry"), statements
    # The one read is the webhook endpoints lookup: nothing written is read back.
    reads = [s for s in statements if s.startswith("SELECT")]
    assert len(reads) == 1
    assert "core_webhookendpoint" in reads[0], statements
    assert not [s for s in statements if "SAVEPOINT" in s], statements
    assert config_members(redis, bulletin) == {f"{bulletin.pk}_0"}
    assert ids(client_for(recipient).get("/api/v1/inbox/")) == [f"b{bulletin.pk}", f"b{bulletin.pk - 1}"]
    item = inbox_item_get(user=recipient, item_id=f"b{bulletin.pk}")
    assert (item.title, item.body_html) == ("News", "<p>News</p>")


def test_a_group_bulletin_reaches_its_groups_only(
    recipient: Any, other_recipient: Any, outsider: Any, redis: Any, clock: Any
) -> None:
    vip = make_group("vip", recipient)
    staff = make_group("staff", other_recipient)
    bulletin = services.bulletin_create(
        title="Members", body_html="<p>x</p>", display_time=clock.now, group_ids=[vip.pk, staff.pk]
    )
    assert set(bulletin.groups.values_list("pk", flat=True)) == {vip.pk, staff.pk}
    assert config_members(redis, bulletin) == {f"{bulletin.pk}_{vip.pk}", f"{bulletin.pk}_{staff.pk}"}
    for user in (recipient, other_recipient):
        assert ids(client_for(user).get("/api/v1/inbox/")) == [f"b{bulletin.pk}"]
    assert client_for(outsider).get("/api/v1/inbox/").json()["results"] == []


@pytest.mark.parametrize("side", ["bulletin", "group"])
def test_groups_changed_later_in_the_transaction_win(
    side: str, recipient: Any, outsider: Any, redis: Any, clock: Any
) -> None:
    """Groups added after the create, in the same transaction, from either side
    of the relation: the mirror at commit sees them (it reloads, not reuses)."""
    vip = make_group("vip", recipient)
    with transaction.atomic():
        bulletin = services.bulletin_create(title="B", body_html="<p>x</p>", display_time=clock.now)
        if side == "bulletin":
            bulletin.groups.add(vip)
        else:
            vip.bulletins.add(bulletin)
    assert config_members(redis, bulletin) == {f"{bulletin.pk}_{vip.pk}"}
    assert client_for(outsider).get("/api/v1/inbox/").json()["results"] == []
    assert ids(client_for(recipient).get("/api/v1/inbox/")) == [f"b{bulletin.pk}"]


def test_groups_changed_from_the_groups_side_later_win(recipient: Any, redis: Any, clock: Any) -> None:
    vip = make_group("vip", recipient)
    bulletin = services.bulletin_create(title="B", body_html="<p>x</p>", display_time=clock.now, group_ids=[vip.pk])
    # Removed from the group's side, it is for everyone again.
    vip.bulletins.remove(bulletin)
    assert config_members(redis, bulletin) == {f"{bulletin.pk}_0"}
    vip.bulletins.add(bulletin)
    assert config_members(redis, bulletin) == {f"{bulletin.pk}_{vip.pk}"}
    vip.bulletins.clear()
    assert config_members(redis, bulletin) == {f"{bulletin.pk}_0"}


def test_fields_saved_later_in_the_transaction_win(recipient: Any, clock: Any) -> None:
    with transaction.atomic():
        bulletin = services.bulletin_create(title="Draft", body_html="<p>x</p>", display_time=clock.now)
        services.bulletin_update(bulletin=Bulletin.objects.get(pk=bulletin.pk), data={"title": "Final"})
    assert inbox_item_get(user=recipient, item_id=f"b{bulletin.pk}").title == "Final"


def test_unsaved_changes_to_the_instance_are_not_published(recipient: Any, clock: Any) -> None:
    with transaction.atomic():
        bulletin = services.bulletin_create(title="Stored", body_html="<p>x</p>", display_time=clock.now)
        bulletin.title = "Never saved"
    assert inbox_item_get(user=recipient, item_id=f"b{bulletin.pk}").title == "Stored"


def test_deleted_in_the_same_transaction_leaves_nothing(recipient: Any, redis: Any, clock: Any) -> None:
    with transaction.atomic():
        bulletin = services.bulletin_create(title="Gone", body_html="<p>x</p>", display_time=clock.now)
        services.bulletin_delete(bulletin=bulletin)
    assert config_members(redis, bulletin) == set()
    assert client_for(recipient).get("/api/v1/inbox/").json()["results"] == []


def test_redis_failing_at_commit_queues_a_reloading_mirror(
    recipient: Any, redis: Any, clock: Any, monkeypatch: Any
) -> None:
    real = publish.bulletin_put

    def down(**kwargs: Any) -> int:
        raise RedisConnectionError("connection refused")

    monkeypatch.setattr(publish, "bulletin_put", down)
    bulletin = services.bulletin_create(title="Later", body_html="<p>x</p>", display_time=clock.now)
    assert config_members(redis, bulletin) == set()
    assert outbox.pending_count() == 1
    monkeypatch.setattr(publish, "bulletin_put", real)
    assert outbox.replay() == 1
    assert config_members(redis, bulletin) == {f"{bulletin.pk}_0"}
    assert ids(client_for(recipient).get("/api/v1/inbox/")) == [f"b{bulletin.pk}"]


def test_an_edit_of_its_words_only_leaves_every_inbox_alone(recipient: Any, redis: Any, clock: Any) -> None:
    """A title or body edit writes the detail and nothing inboxes settle: no
    removal, no new merge marker, and a user's archive of it stays as it was
    without the rows being placed again. Moving it does all of that."""
    bulletin = services.bulletin_create(title="News", body_html="<p>x</p>", display_time=clock.now)
    services.inbox_archive(user=recipient, item_id=bulletin.ref)
    marks = (mc_keys.removed_version(), mc_keys.bulletin_update_time())
    before = redis.mget(marks)

    services.bulletin_update(bulletin=bulletin, data={"title": "News, corrected", "body_html": "<p>y</p>"})
    assert redis.mget(marks) == before
    assert inbox_item_get(user=recipient, item_id=bulletin.ref).title == "News, corrected"
    archived = {m.decode() for m in redis.zrange(mc_keys.inbox_archived(recipient.pk), 0, -1)}
    assert archived == {bulletin_entry(bulletin).member}

    services.bulletin_update(bulletin=bulletin, data={"display_time": clock.now - timedelta(minutes=5)})
    removed, updated = redis.mget(marks)
    assert int(removed) > int(before[0] or 0)
    assert int(updated) > int(before[1])
    archived = redis.zrange(mc_keys.inbox_archived(recipient.pk), 0, -1, withscores=True)
    # Placed again from the row, at the new display time.
    assert [(m.decode(), int(s)) for m, s in archived] == [
        (bulletin_entry(bulletin).member, to_ms(clock.now - timedelta(minutes=5)))
    ]
