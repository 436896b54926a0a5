"""Push vs pull, idempotent fan-out, expiry and retraction: PostgreSQL first, then Redis."""

from typing import Any

import pytest
from pyroaring import BitMap

from messagecenter import keys as mc_keys
from messagecenter import services, tasks
from messagecenter.models import FanoutChunk, Message, MessageStatus
from messagecenter.readmodel import bits, inbox, to_ms
from tests.conftest import client_for
from tests.factories import UserFactory
from tests.fixtures.readmodel import keyspace_scan
from tests.messagecenter.conftest import ids, make_group, send

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def small_threshold(settings: Any) -> None:
    settings.MESSAGECENTER_PUSH_THRESHOLD = 2
    settings.MESSAGECENTER_FANOUT_CHUNK = 2


@pytest.mark.usefixtures("small_threshold")
def test_push_below_threshold_in_chunks(
    operator: Any, recipient: Any, other_recipient: Any, redis: Any, clock: Any
) -> None:
    message = send(operator, to={"users": [recipient, other_recipient]})
    # PostgreSQL: the audience is a bitmap, not rows; progress is per chunk.
    assert message.delivery == "push"
    assert message.audience_size == 2
    assert BitMap.deserialize(bytes(message.audience_bitmap)) == BitMap([recipient.pk, other_recipient.pk])
    assert message.status == MessageStatus.DELIVERED
    assert list(FanoutChunk.objects.filter(message=message).values_list("index", "size")) == [(0, 2)]
    # Redis: written into each recipient's inbox as an arrival, placed by their next read.
    member = f"m{message.pk}|system|{message.slot_month}|{message.slot_offset}"
    for user in (recipient, other_recipient):
        assert redis.zscore(mc_keys.inbox(user.pk), member) == to_ms(message.created_at)
        assert redis.zscore(mc_keys.inbox_arrivals(user.pk), member) == to_ms(message.created_at)
        assert redis.zscore(mc_keys.inbox_category(user.pk, "system"), member) is None
        assert inbox.inbox_counts(user_id=user.pk, now_ms=to_ms(message.created_at)).unread == 1
        assert redis.exists(mc_keys.inbox_arrivals(user.pk)) == 0
        assert redis.zscore(mc_keys.inbox_category(user.pk, "system"), member) is not None
        assert message.slot_offset in bits.read_many([mc_keys.push_bitmap(user.pk, message.slot_month)])[0]


@pytest.mark.usefixtures("small_threshold")
def test_pull_above_threshold(
    operator: Any, recipient: Any, other_recipient: Any, outsider: Any, redis: Any, clock: Any
) -> None:
    carol = UserFactory(username="carol")
    group = make_group("vip", recipient, other_recipient, carol)
    message = send(operator, to={"groups": [group]})
    assert message.delivery == "pull"
    assert message.audience_size == 3
    assert redis.zcard(mc_keys.inbox(recipient.pk)) == 0  # nothing written per user
    assert redis.zcard(mc_keys.pull()) == 1
    for user in (recipient, other_recipient, carol):
        assert ids(client_for(user).get("/api/v1/inbox/")) == [f"m{message.pk}"]
    assert client_for(outsider).get("/api/v1/inbox/").json()["results"] == []
    assert client_for(outsider).get(f"/api/v1/inbox/m{message.pk}/").status_code == 404
    # The audience was fixed at send time: a later member does not get it.
    dave = UserFactory(username="dave")
    services.user_group_add_members(group=group, user_ids=[dave.pk])
    assert client_for(dave).get("/api/v1/inbox/").json()["results"] == []


def test_overlapping_groups_count_each_member_once(
    operator: Any, recipient: Any, other_recipient: Any, outsider: Any, redis: Any, clock: Any
) -> None:
    # The members of all the groups come back in one query (one array on
    # PostgreSQL, with no DISTINCT): a user in two groups and named
    # explicitly too is one recipient; an empty group adds nobody.
    carol = UserFactory(username="carol")
    both = make_group("both-a", recipient, other_recipient)
    other = make_group("both-b", other_recipient, carol)
    empty = make_group("nobody")
    message = send(operator, to={"groups": [both, other, empty], "users": [other_recipient]})
    assert message.audience_size == 3
    assert message.audience == BitMap([recipient.pk, other_recipient.pk, carol.pk])
    assert message.delivery == "push"
    for user in (recipient, other_recipient, carol):
        assert redis.zcard(mc_keys.inbox(user.pk)) == 1
        assert inbox.inbox_counts(user_id=user.pk, now_ms=to_ms(message.created_at)).unread == 1
        assert redis.hget(mc_keys.inbox_counters(user.pk), "system") == b"1"
    assert redis.zcard(mc_keys.inbox(outsider.pk)) == 0
    assert services.message_audience_preview(group_ids=[empty.pk]) == 0


def test_everyone_is_pull_and_reaches_new_users(operator: Any, recipient: Any, clock: Any) -> None:
    message = send(operator, to={"everyone": True}, category="promotion")
    assert message.delivery == "pull"
    assert message.audience_size is None
    late = UserFactory(username="late")
    for user in (recipient, late):
        assert ids(client_for(user).get("/api/v1/inbox/")) == [f"m{message.pk}"]
        assert client_for(user).get("/api/v1/inbox/counts/").json()["by_category"]["promotion"] == 1


@pytest.mark.usefixtures("small_threshold")
def test_fanout_twice_changes_nothing(
    operator: Any, recipient: Any, other_recipient: Any, redis: Any, clock: Any
) -> None:
    message = send(operator, to={"users": [recipient, other_recipient]})
    client = client_for(recipient)
    client.post(f"/api/v1/inbox/m{message.pk}/read/")
    before = {k: redis.dump(k) for k in sorted(keyspace_scan(redis, "*{u*"))}
    tasks.message_deliver_task(message.pk)
    tasks.message_fanout_chunk_task(message.pk, 0)
    after = {k: redis.dump(k) for k in sorted(keyspace_scan(redis, "*{u*"))}
    assert before
    assert before == after
    assert FanoutChunk.objects.filter(message=message).count() == 1
    assert client.get("/api/v1/inbox/counts/").json()["unread"] == 0
    assert client_for(other_recipient).get("/api/v1/inbox/counts/").json()["unread"] == 1


@pytest.mark.usefixtures("small_threshold")
def test_pull_register_twice_changes_nothing(operator: Any, clock: Any) -> None:
    users = [UserFactory() for _ in range(3)]
    message = send(operator, to={"users": users})
    tasks.message_deliver_task(message.pk)
    client = client_for(users[0])
    assert ids(client.get("/api/v1/inbox/")) == [f"m{message.pk}"]
    assert client.get("/api/v1/inbox/counts/").json()["unread"] == 1


def test_expiry_is_exact(operator: Any, recipient: Any, clock: Any) -> None:
    start = clock.now
    from datetime import timedelta

    push = send(operator, to={"users": [recipient]}, expire_at=start + timedelta(minutes=5))
    pull = send(operator, to={"everyone": True}, expire_at=start + timedelta(minutes=5))
    client = client_for(recipient)
    assert set(ids(client.get("/api/v1/inbox/"))) == {f"m{push.pk}", f"m{pull.pk}"}
    clock.now = start + timedelta(minutes=5) - timedelta(milliseconds=1)
    assert client.get("/api/v1/inbox/counts/").json()["unread"] == 2
    clock.now = start + timedelta(minutes=5)
    assert client.get("/api/v1/inbox/counts/").json()["unread"] == 0
    assert client.get("/api/v1/inbox/").json()["results"] == []
    assert client.get(f"/api/v1/inbox/m{push.pk}/").status_code == 404
    late = UserFactory(username="late")
    assert client_for(late).get("/api/v1/inbox/").json()["results"] == []


@pytest.mark.usefixtures("small_threshold")
def test_retraction_hides_everywhere_at_once(operator: Any, recipient: Any, other_recipient: Any, clock: Any) -> None:
    push = send(operator, to={"users": [recipient]})
    pull = send(operator, to={"everyone": True})
    client = client_for(recipient)
    client.post(f"/api/v1/inbox/m{push.pk}/read/")
    assert services.message_retract(message=push, actor=operator) is True
    assert services.message_retract(message=pull, actor=operator) is True
    assert services.message_retract(message=pull, actor=operator) is False
    assert Message.objects.filter(status=MessageStatus.RETRACTED).count() == 2
    for user in (recipient, other_recipient):
        c = client_for(user)
        assert c.get("/api/v1/inbox/").json()["results"] == []
        assert c.get("/api/v1/inbox/counts/").json()["unread"] == 0
    assert client.get(f"/api/v1/inbox/m{push.pk}/").status_code == 404
    # A retracted message is never delivered again by a late task.
    tasks.message_deliver_task(push.pk)
    tasks.message_fanout_chunk_task(push.pk, 0)
    assert client.get("/api/v1/inbox/").json()["results"] == []


def test_hidden_items_stay_hidden_after_redelivery(operator: Any, recipient: Any, clock: Any) -> None:
    message = send(operator, to={"users": [recipient]})
    client = client_for(recipient)
    assert client.delete(f"/api/v1/inbox/m{message.pk}/").status_code == 204
    tasks.message_fanout_chunk_task(message.pk, 0)
    assert client.get("/api/v1/inbox/").json()["results"] == []


def test_inbox_deliver_is_the_entry_point_for_other_sources(recipient: Any, outsider: Any, clock: Any) -> None:
    from messagecenter.readmodel import InboxEntry

    month, offset = services.slot_allocate(at=clock.now)
    entry = InboxEntry(ref="n42", category="system", month=month, offset=offset, score=to_ms(clock.now))
    detail: dict[str, Any]
    detail = {"id": "n42", "kind": "notification", "category": "system", "title": "Stock low", "summary": "",
              "body_html": "<p>Replenish</p>", "images": [], "link": None, "member": entry.member}  # fmt: skip
    assert services.inbox_deliver(entry=entry, user_ids=[recipient.pk], detail=detail) == 1
    assert services.inbox_deliver(entry=entry, user_ids=[recipient.pk]) == 0
    item = client_for(recipient).get("/api/v1/inbox/").json()["results"][0]
    assert (item["id"], item["kind"]) == ("n42", "notification")
    assert client_for(outsider).get("/api/v1/inbox/n42/").status_code == 404


def test_bit_offsets_are_per_month(operator: Any, recipient: Any, clock: Any) -> None:
    from datetime import timedelta

    first = send(operator, to={"users": [recipient]})
    clock.advance(days=20)
    second = send(operator, to={"users": [recipient]})
    assert (first.slot_month, first.slot_offset) == (202611, 0)
    assert (second.slot_month, second.slot_offset) == (202612, 0)
    client = client_for(recipient)
    client.post(f"/api/v1/inbox/m{first.pk}/read/")
    body = client.get("/api/v1/inbox/").json()
    assert [(i["id"], i["read"]) for i in body["results"]] == [(f"m{second.pk}", False), (f"m{first.pk}", True)]
    assert client.post("/api/v1/inbox/read-all/").json() == {"marked": 1}
    _ = timedelta


def test_retraction_during_fanout_still_wins(operator: Any, recipient: Any, clock: Any) -> None:
    message = send(operator, to={"users": [recipient]})
    stale = Message.objects.get(pk=message.pk)  # what an in-flight task loaded before the retraction
    services.message_retract(message=message)
    client = client_for(recipient)
    assert client.get("/api/v1/inbox/").json()["results"] == []  # settled the removal already
    services.message_fanout_chunk(message=stale, index=0)  # the late write lands after the removal
    assert client.get("/api/v1/inbox/").json()["results"] == []
    assert client.get("/api/v1/inbox/counts/").json()["unread"] == 0


def test_cleanup_of_expired_messages(operator: Any, recipient: Any, redis: Any, clock: Any, settings: Any) -> None:
    from datetime import timedelta

    settings.MESSAGECENTER_PUSH_THRESHOLD = 1
    other = UserFactory(username="other")
    pull = send(operator, to={"users": [recipient, other]}, expire_at=clock.now + timedelta(minutes=1))
    keep = send(operator, to={"users": [recipient, other]})
    assert services.message_cleanup_expired() == 0
    clock.advance(minutes=1)
    assert tasks.cleanup_expired_task() == 1
    assert Message.objects.get(pk=pull.pk).status == MessageStatus.EXPIRED
    assert redis.zcard(mc_keys.pull()) == 1
    assert redis.hget(mc_keys.item_detail(), f"m{pull.pk}") is None
    assert redis.get(mc_keys.pull_audience(f"m{pull.pk}", 0)) is None
    assert ids(client_for(recipient).get("/api/v1/inbox/")) == [f"m{keep.pk}"]


def test_trimmed_removals_fall_back_to_a_full_settle(
    operator: Any, recipient: Any, other_recipient: Any, redis: Any, clock: Any
) -> None:
    from datetime import timedelta

    alice, bob = client_for(recipient), client_for(other_recipient)
    first = send(operator, to={"users": [recipient, other_recipient]}, title="first")
    second = send(operator, to={"users": [recipient]}, title="second")
    bulletin = services.bulletin_create(title="b", body_html="", display_time=clock.now)
    assert len(ids(alice.get("/api/v1/inbox/"))) == 3  # alice settles now
    assert len(ids(bob.get("/api/v1/inbox/"))) == 2
    alice.post(f"/api/v1/inbox/b{bulletin.pk}/read/")
    services.message_retract(message=first)
    services.bulletin_update(bulletin=bulletin, data={"display_time": clock.now + timedelta(hours=1)})
    assert services.inbox_removed_trim(keep=0) == 2
    assert redis.zcard(mc_keys.removed()) == 0
    # Alice and Bob never saw those removals; they check their whole inbox instead.
    assert ids(alice.get("/api/v1/inbox/")) == [f"m{second.pk}"]
    assert bob.get("/api/v1/inbox/").json()["results"] == []
    clock.advance(hours=1)
    body = alice.get("/api/v1/inbox/").json()
    assert [(i["id"], i["read"]) for i in body["results"]] == [(f"b{bulletin.pk}", True), (f"m{second.pk}", False)]
    assert body["unread_count"] == 1
    assert tasks.removed_trim_task() == 0
