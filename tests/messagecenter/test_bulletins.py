"""Bulletins: display time, expiry, groups joined later, edits, merge idempotence."""

from datetime import timedelta
from typing import Any

import pytest

from messagecenter import keys as mc_keys
from messagecenter import services
from messagecenter.models import UserGroup
from messagecenter.readmodel import bits
from tests.conftest import client_for
from tests.messagecenter.conftest import ids, make_group

pytestmark = pytest.mark.django_db(transaction=True)


def test_config_keys_follow_the_seed(recipient: Any, redis: Any, clock: Any) -> None:
    group = make_group("vip", recipient)
    bulletin = services.bulletin_create(title="B", body_html="<p>x</p>", display_time=clock.now, group_ids=[group.pk])
    everyone = services.bulletin_create(title="E", body_html="", display_time=clock.now)
    config = dict(redis.zrange(mc_keys.bulletin_config(), 0, -1, withscores=True))
    assert set(config) == {f"{bulletin.pk}_{group.pk}".encode(), f"{everyone.pk}_0".encode()}
    assert redis.hget(mc_keys.bulletin_detail(), f"{bulletin.pk}_{group.pk}") is not None
    assert int(redis.get(mc_keys.bulletin_update_time())) >= int(clock.now.timestamp() * 1000)
    client_for(recipient).get("/api/v1/inbox/")
    assert redis.get(mc_keys.bulletin_access_time(recipient.pk)) is not None


def test_future_display_time_appears_once_it_passes(recipient: Any, clock: Any) -> None:
    bulletin = services.bulletin_create(title="Soon", body_html="", display_time=clock.now + timedelta(hours=1))
    client = client_for(recipient)
    assert client.get("/api/v1/inbox/").json()["results"] == []
    assert client.get(f"/api/v1/inbox/b{bulletin.pk}/").status_code == 404
    clock.advance(hours=1)
    response = client.get("/api/v1/inbox/")
    assert ids(response) == [f"b{bulletin.pk}"]
    assert response.json()["results"][0]["created_at"] == bulletin.display_time.isoformat()
    assert client.get("/api/v1/inbox/counts/").json()["by_category"]["system"] == 1


def test_expired_bulletin_disappears_exactly(recipient: Any, clock: Any) -> None:
    expire = clock.now + timedelta(minutes=10)
    bulletin = services.bulletin_create(title="Short", body_html="", display_time=clock.now, expire_at=expire)
    client = client_for(recipient)
    assert ids(client.get("/api/v1/inbox/")) == [f"b{bulletin.pk}"]
    clock.now = expire - timedelta(milliseconds=1)
    assert client.get("/api/v1/inbox/counts/").json()["unread"] == 1
    clock.now = expire
    assert client.get("/api/v1/inbox/").json()["results"] == []
    assert client.get("/api/v1/inbox/counts/").json()["unread"] == 0


def test_group_bulletins_and_joining_later(recipient: Any, other_recipient: Any, outsider: Any, clock: Any) -> None:
    group = make_group("staff-news", recipient)
    bulletin = services.bulletin_create(title="G", body_html="", display_time=clock.now, group_ids=[group.pk])
    assert ids(client_for(recipient).get("/api/v1/inbox/")) == [f"b{bulletin.pk}"]
    bob = client_for(other_recipient)
    assert bob.get("/api/v1/inbox/").json()["results"] == []
    assert bob.get(f"/api/v1/inbox/b{bulletin.pk}/").status_code == 404
    services.user_group_add_members(group=group, user_ids=[other_recipient.pk])
    assert ids(bob.get("/api/v1/inbox/")) == [f"b{bulletin.pk}"]
    # Leaving the group takes the group's bulletins away; read state survives a return.
    bob.post(f"/api/v1/inbox/b{bulletin.pk}/read/")
    services.user_group_remove_members(group=group, user_ids=[other_recipient.pk])
    assert bob.get("/api/v1/inbox/").json()["results"] == []
    services.user_group_add_members(group=group, user_ids=[other_recipient.pk])
    assert bob.get("/api/v1/inbox/").json()["results"][0]["read"] is True
    assert bob.get("/api/v1/inbox/counts/").json()["unread"] == 0
    assert client_for(outsider).get("/api/v1/inbox/").json()["results"] == []


def test_edit_moves_display_time_and_groups(recipient: Any, other_recipient: Any, clock: Any) -> None:
    group = make_group("vip", recipient)
    bulletin = services.bulletin_create(title="B", body_html="", display_time=clock.now)
    alice, bob = client_for(recipient), client_for(other_recipient)
    assert ids(bob.get("/api/v1/inbox/")) == [f"b{bulletin.pk}"]
    services.bulletin_update(bulletin=bulletin, data={"group_ids": [group.pk]})
    assert bob.get("/api/v1/inbox/").json()["results"] == []
    assert ids(alice.get("/api/v1/inbox/")) == [f"b{bulletin.pk}"]
    services.bulletin_update(bulletin=bulletin, data={"display_time": clock.now + timedelta(days=1)})
    assert alice.get("/api/v1/inbox/").json()["results"] == []
    clock.advance(days=1)
    assert ids(alice.get("/api/v1/inbox/")) == [f"b{bulletin.pk}"]


def test_merge_is_idempotent(recipient: Any, redis: Any, clock: Any) -> None:
    services.bulletin_create(title="B", body_html="", display_time=clock.now)
    client = client_for(recipient)
    client.get("/api/v1/inbox/")
    redis.delete(mc_keys.bulletin_access_time(recipient.pk))  # force a second merge
    client.get("/api/v1/inbox/")
    assert redis.zcard(mc_keys.inbox(recipient.pk)) == 1
    assert client.get("/api/v1/inbox/counts/").json()["unread"] == 1


def test_hidden_bulletin_is_not_merged_back(recipient: Any, clock: Any) -> None:
    bulletin = services.bulletin_create(title="B", body_html="", display_time=clock.now)
    client = client_for(recipient)
    client.get("/api/v1/inbox/")
    assert client.delete(f"/api/v1/inbox/b{bulletin.pk}/").status_code == 204
    services.bulletin_update(bulletin=bulletin, data={"title": "Edited"})
    assert client.get("/api/v1/inbox/").json()["results"] == []


def test_deleting_a_group_refreshes_members_and_drops_its_bulletins(
    recipient: Any, other_recipient: Any, clock: Any, redis: Any
) -> None:
    group = make_group("temp", recipient)
    other = make_group("other", recipient)
    only = services.bulletin_create(title="only", body_html="", display_time=clock.now, group_ids=[group.pk])
    shared = services.bulletin_create(title="s", body_html="", display_time=clock.now, group_ids=[group.pk, other.pk])
    assert redis.smembers(mc_keys.user_groups(recipient.pk))
    assert services.user_group_delete(group=group) == 1
    assert not UserGroup.objects.filter(pk=group.pk).exists()
    assert redis.smembers(mc_keys.user_groups(recipient.pk)) == {str(other.pk).encode()}
    assert ids(client_for(recipient).get("/api/v1/inbox/")) == [f"b{shared.pk}"]
    # The bulletin meant for the deleted group did not become everyone's.
    assert client_for(other_recipient).get("/api/v1/inbox/").json()["results"] == []
    assert only.pk is not None


def test_read_all_leaves_items_that_are_no_longer_in_the_inbox_unread(
    operator: Any, recipient: Any, clock: Any, redis: Any
) -> None:
    """ "Read all" turns read exactly the items present (the push bits), so a
    bulletin of a group the user left, or an item they hid, is not swallowed:
    back in the group, the bulletin is still unread."""
    from tests.messagecenter.conftest import send

    group = make_group("staff-news", recipient)
    bulletin = services.bulletin_create(title="G", body_html="", display_time=clock.now, group_ids=[group.pk])
    hidden = send(operator, to={"users": [recipient]}, title="hidden")
    kept = send(operator, to={"users": [recipient]}, title="kept")
    alice = client_for(recipient)
    assert set(ids(alice.get("/api/v1/inbox/"))) == {f"b{bulletin.pk}", hidden.ref, kept.ref}
    assert alice.delete(f"/api/v1/inbox/{hidden.ref}/").status_code == 204
    services.user_group_remove_members(group=group, user_ids=[recipient.pk])
    assert ids(alice.get("/api/v1/inbox/")) == [kept.ref]
    month = kept.slot_month
    assert hidden.slot_offset not in bits.read_many([mc_keys.push_bitmap(recipient.pk, month)])[0]
    assert alice.post("/api/v1/inbox/read-all/", {}, format="json").json() == {"marked": 1}
    assert hidden.slot_offset not in bits.read_many([mc_keys.read_bitmap(recipient.pk, month)])[0]
    assert bulletin.slot_offset not in bits.read_many([mc_keys.read_bitmap(recipient.pk, month)])[0]
    services.user_group_add_members(group=group, user_ids=[recipient.pk])
    page = alice.get("/api/v1/inbox/").json()
    assert {(r["id"], r["read"]) for r in page["results"]} == {(f"b{bulletin.pk}", False), (kept.ref, True)}
    assert page["unread_count"] == 1
