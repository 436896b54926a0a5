"""Each user's part of the read model is a cache of PostgreSQL, filled on the
user's first read: after a private redis-server loses its data, the rebuild
restores only what users share, and every user who comes back is filled from
PostgreSQL (read marks, archived and hidden items, groups, answers) while
those who do not come back cost Redis nothing. A read that meets another
process's fill answers from PostgreSQL; a mark made meanwhile, or one that
Redis missed, drops the user's part and is read back by the next fill."""

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from redis.exceptions import ConnectionError as RedisConnectionError

from core import keys
from core import readmodel as core_readmodel
from durability import healing, rebuild
from durability.models import OutboxEntry
from messagecenter import fill
from messagecenter import keys as mc_keys
from messagecenter import services as mc_services
from messagecenter.fill import inbox_fill
from messagecenter.models import Message
from messagecenter.readmodel import inbox as inbox_rm
from messagecenter.readmodel.scripts import WRITE_GRACE_MS, idle_ms
from messagecenter.readmodel.user_part import user_part_filled, users_filled
from messagecenter.selectors import inbox_list
from messagecenter.services.inbox_actions import inbox_archive
from messagecenter.user_rows import user_rows
from tests.conftest import client_for
from tests.factories import UserFactory
from tests.faults.conftest import RedisServer, wait_healer
from tests.messagecenter.conftest import make_group

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis_server]


def _send(operator: Any, user_ids: list[int], title: str, **extra: Any) -> str:
    sent = mc_services.message_send(
        sender=operator, category="system", title=title, body_html="<p>b</p>", user_ids=user_ids, **extra
    )
    return str(Message.objects.get(pk=sent.pk).ref)


def _seen(client: Any) -> tuple[Any, ...]:
    """What a user sees: the page (ids, read, group counts), the archived list and the counts."""
    page = client.get("/api/v1/inbox/")
    assert page.status_code == 200, page.content[:300]
    archived = client.get("/api/v1/inbox/?archived=true")
    counts = client.get("/api/v1/inbox/counts/")
    assert archived.status_code == 200
    assert counts.status_code == 200
    rows = [(r["id"], r["read"], (r.get("group") or {}).get("count")) for r in page.json()["results"]]
    return rows, [r["id"] for r in archived.json()["results"]], counts.json()["unread"]


def _filled(user: Any) -> bool:
    """Whether Redis holds the user's part, filled for the current generation."""
    return bool(users_filled(user_ids=[user.pk], generation=healing.user_generation()))


def _user_keys(server: RedisServer, user_id: int) -> list[bytes]:
    """The per-user keys Redis holds for this user (every one carries the user's tag)."""
    return sorted(server.client().scan_iter(match=f"*{keys.user_tag(user_id)}*", count=1000))


# Per-user keys that are not part of the read model: read-through cache entries
# (the token's owner, the language, the platforms) and the live version.
NOT_THE_PART = (b":auth:", b":live:", b":user:language:", b":user:platforms:")


def _members(server: RedisServer, user_id: int, ref: str) -> list[bytes]:
    """The members of ``ref`` in the user's inbox zset Redis holds."""
    found = server.client().zrange(mc_keys.inbox(user_id), 0, -1)
    return [m for m in found if m.split(b"|")[0] == ref.encode()]


def _part_keys(server: RedisServer, user_id: int) -> list[bytes]:
    """The keys of the user's part of the read model Redis holds."""
    return [name for name in _user_keys(server, user_id) if not any(mark in name for mark in NOT_THE_PART)]


def _lose_and_rebuild(server: RedisServer) -> None:
    """Redis loses everything; the next look notices and the rebuild restores what users share."""
    server.client().flushall()
    assert not healing.check(fresh=True)  # noticed: the healer starts the rebuild
    wait_healer()
    assert healing.check(fresh=True)


@pytest.fixture
def world(healing_on: RedisServer, operator: Any) -> dict[str, Any]:
    users = [UserFactory() for _ in range(3)]
    ids = [u.pk for u in users]
    refs = [_send(operator, ids, f"all {i}") for i in range(3)]
    grouped = [_send(operator, ids[:2], f"c{i}", group_key="order:7", actor=f"A{i}") for i in range(3)]
    assert rebuild.rebuild() is not None
    first, second = client_for(users[0]), client_for(users[1])
    assert first.post(f"/api/v1/inbox/{refs[0]}/read/").status_code == 204
    inbox_archive(user=users[0], item_id=refs[1])
    assert second.post("/api/v1/inbox/read-all/").status_code == 200
    return {"users": users, "refs": refs, "grouped": grouped, "server": healing_on}


def test_after_a_loss_each_user_is_filled_on_their_first_read(world: dict[str, Any]) -> None:
    users, server = world["users"], world["server"]
    clients = [client_for(u) for u in users]
    before = [_seen(c) for c in clients]
    assert before[0][1] == [world["refs"][1]]
    assert before[1][2] == 0

    _lose_and_rebuild(server)
    # Shared keys are back; nobody's own part is.
    assert all(not _user_keys(server, u.pk) for u in users)

    assert _seen(clients[0]) == before[0]
    assert _user_keys(server, users[0].pk)
    assert server.client().hget(mc_keys.inbox_state(users[0].pk), "fill") == str(healing.user_generation()).encode()
    # The others have not come back: Redis holds nothing of theirs.
    assert not _user_keys(server, users[1].pk)
    assert not _user_keys(server, users[2].pk)
    # Answered from Redis now (a second read is not degraded).
    assert not inbox_list(user=users[0], limit=50).degraded

    assert [_seen(c) for c in clients[1:]] == before[1:]


def test_a_push_to_users_who_are_not_back_writes_nothing_of_theirs(world: dict[str, Any], operator: Any) -> None:
    """After a loss only the users who came back hold a part: a push to everyone
    writes into theirs and nothing into the others' (their recipient rows are
    the item's record), and an absent user who then comes back is filled with it."""
    users, server = world["users"], world["server"]
    back, away = client_for(users[0]), client_for(users[1])
    _lose_and_rebuild(server)
    _seen(back)
    ref = _send(operator, [u.pk for u in users], "after the loss")
    assert not _user_keys(server, users[1].pk)
    assert not _user_keys(server, users[2].pk)
    assert _members(server, users[0].pk, ref)  # delivered into the part Redis holds
    assert _seen(back)[0][0][0] == ref
    assert _seen(away)[0][0][0] == ref  # filled now, from PostgreSQL
    assert _members(server, users[1].pk, ref)
    assert not inbox_list(user=users[1], limit=50).degraded


def test_a_membership_change_of_users_who_are_not_back_writes_nothing_of_theirs(world: dict[str, Any]) -> None:
    """The group sets of the users whose part Redis holds follow a membership
    change; the others get no key (their fill reads the rows), and a bulletin to
    the group reaches both."""
    users, server = world["users"], world["server"]
    back, away = client_for(users[0]), client_for(users[1])
    _lose_and_rebuild(server)
    _seen(back)
    group = make_group("joined after the loss", users[0], users[1])
    assert server.client().smembers(mc_keys.user_groups(users[0].pk)) == {str(group.pk).encode()}
    assert not _user_keys(server, users[1].pk)
    bulletin = mc_services.bulletin_create(
        title="to the group", body_html="<p>b</p>", display_time=timezone.now(), group_ids=[group.pk]
    )
    assert _seen(back)[0][0][0] == f"b{bulletin.pk}"
    assert _seen(away)[0][0][0] == f"b{bulletin.pk}"  # filled now, with the membership
    assert server.client().smembers(mc_keys.user_groups(users[1].pk)) == {str(group.pk).encode()}


def test_operator_writes_to_users_who_are_not_back_write_nothing_of_theirs(world: dict[str, Any]) -> None:
    """A notification's holders index and a bulletin moved to show later (the
    users' archive of it freed) reach the users whose part Redis holds only;
    the others' next fill reads the rows."""
    users, server = world["users"], world["server"]
    back, away = client_for(users[0]), client_for(users[1])
    bulletin = mc_services.bulletin_create(title="shown now", body_html="<p>b</p>", display_time=timezone.now())
    for user in users[:2]:
        inbox_archive(user=user, item_id=bulletin.ref)
    mc_services.message_type_create(code="replenish", name="Replenish", default_ttl_seconds=3600)
    for user in users[:2]:
        mc_services.subscription_create(message_type="replenish", scope="WH1", user_id=user.pk)
    _lose_and_rebuild(server)
    _seen(back)

    notification = mc_services.notification_send(
        message_type="replenish", scope="WH1", title="Replenish A-01", body_html="<p>low</p>"
    )
    assert server.client().smembers(mc_keys.notification_holders()) == {str(users[0].pk).encode()}
    mc_services.bulletin_update(bulletin=bulletin, data={"display_time": timezone.now() + timedelta(hours=1)})
    assert not _user_keys(server, users[1].pk)
    assert not _user_keys(server, users[2].pk)

    assert _seen(back)[0][0][0] == notification.ref
    assert _seen(away)[0][0][0] == notification.ref  # filled now, from PostgreSQL
    assert server.client().smembers(mc_keys.notification_holders()) == {str(u.pk).encode() for u in users[:2]}
    assert bulletin.ref not in _seen(away)[1]  # its archive went with the move


def test_a_read_during_another_fill_answers_from_postgresql(world: dict[str, Any]) -> None:
    user, server = world["users"][0], world["server"]  # grouped rows, a read, an archived item
    client = client_for(user)
    before = _seen(client)
    _lose_and_rebuild(server)
    state = mc_keys.inbox_state(user.pk)
    assert core_readmodel.cache_fill_lock(key=state, token="other", lease_ms=60_000)

    page = inbox_list(user=user, limit=50)
    assert page.degraded  # from PostgreSQL, not an empty Redis
    assert _seen(client) == before
    assert not _user_keys(server, user.pk) or server.client().hget(state, "fill") is None

    core_readmodel.cache_fill_unlock(key=state, token="other")
    assert not inbox_list(user=user, limit=50).degraded
    assert _seen(client) == before


def test_a_mark_made_while_a_fill_outlasts_its_wait_is_read_after_the_fill(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    user, server, refs = world["users"][2], world["server"], world["refs"]
    client = client_for(user)
    _lose_and_rebuild(server)
    state = mc_keys.inbox_state(user.pk)
    assert core_readmodel.cache_fill_lock(key=state, token="other", lease_ms=60_000)
    monkeypatch.setattr(fill, "FILL_WAIT_SECONDS", 0.1)

    # Acknowledged while the user is being filled elsewhere, for longer than the
    # mark waits: committed first, the user's part recorded stale.
    assert client.post(f"/api/v1/inbox/{refs[2]}/read/").status_code == 204
    assert list(OutboxEntry.objects.filter(user_id=user.pk).values_list("topic", flat=True)) == ["inbox.stale"]

    core_readmodel.cache_fill_unlock(key=state, token="other")
    # This fill may have read PostgreSQL before the mark: its end drops what it filled.
    assert inbox_fill(user_id=user.pk)
    assert OutboxEntry.objects.filter(user_id=user.pk).count() == 0
    assert not _filled(user)
    page = inbox_list(user=user, limit=50)
    assert not page.degraded
    assert {item.id: item.read for item in page.results}[refs[2]] is True


def test_a_mark_made_while_a_fill_runs_is_read_back_at_once(world: dict[str, Any]) -> None:
    """The fill ran in another process that read PostgreSQL before the mark
    committed and settled the outbox before the mark's entry was there: the
    marking request waits for that fill to end and drops the part itself, so
    the user's next read fills it with the mark (not after the periodic
    replay, a minute later)."""
    user, server, refs = world["users"][2], world["server"], world["refs"]
    client = client_for(user)
    _lose_and_rebuild(server)
    state = mc_keys.inbox_state(user.pk)
    assert core_readmodel.cache_fill_lock(key=state, token="other", lease_ms=60_000)
    fill._restore(user.pk, user_rows(user.pk), timezone.now(), since=0)  # the other process read PostgreSQL: unread

    def other_fill_ends() -> None:
        user_part_filled(user_id=user.pk, generation=healing.user_generation(), idle_ms=idle_ms(), settled=0)
        core_readmodel.cache_fill_unlock(key=state, token="other")

    ends = threading.Timer(0.3, other_fill_ends)
    ends.start()
    try:
        assert client.post(f"/api/v1/inbox/{refs[2]}/read/").status_code == 204
    finally:
        ends.join()
    assert OutboxEntry.objects.filter(user_id=user.pk).count() == 0
    page = inbox_list(user=user, limit=50)
    assert not page.degraded
    assert {item.id: item.read for item in page.results}[refs[2]] is True


def test_a_mark_redis_missed_drops_the_users_part_before_the_users_next_write(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis keeps its data but misses a committed mark (it refused the call):
    the user's part is recorded stale, and the user's next write drops it
    first (the user's own entries only), so the next read fills both marks
    from PostgreSQL instead of showing the first one undone."""
    user, other, refs = world["users"][2], world["users"][1], world["refs"]
    client = client_for(user)
    now_ms = int(timezone.now().timestamp() * 1000)
    assert {row[0]: row[1] for row in _seen(client)[0]}[refs[0]] is False
    assert _filled(user)

    def refused(**_kwargs: Any) -> bool:
        raise RedisConnectionError("refused")

    with monkeypatch.context() as patched:
        patched.setattr(inbox_rm, "inbox_set_read", refused)
        assert client.post(f"/api/v1/inbox/{refs[0]}/read/").status_code == 204
    assert list(OutboxEntry.objects.filter(user_id=user.pk).values_list("topic", flat=True)) == ["inbox.stale"]
    fill.part_stale(other.pk)  # another user's entry, left to the periodic replay
    row = inbox_rm.inbox_get(user_id=user.pk, ref=refs[0], now_ms=now_ms)
    assert row is not None
    assert row.read is False  # Redis's copy missed the mark

    assert client.post(f"/api/v1/inbox/{refs[1]}/read/").status_code == 204
    assert OutboxEntry.objects.filter(user_id=user.pk).count() == 0
    assert OutboxEntry.objects.filter(user_id=other.pk).count() == 1
    assert not _filled(user)  # dropped, the second mark with it
    read = {row[0]: row[1] for row in _seen(client)[0]}
    assert (read[refs[0]], read[refs[1]]) == (True, True)
    assert _filled(user)


def _notes(server: RedisServer, user_id: int) -> dict[bytes, bytes]:
    """The user's writes in flight as the state hash notes them (their count under "w")."""
    state = server.client().hgetall(mc_keys.inbox_state(user_id))
    return {field: value for field, value in state.items() if field == b"w" or field.startswith(b"w:")}


def test_a_finished_write_leaves_no_note(world: dict[str, Any]) -> None:
    user, server, refs = world["users"][2], world["server"], world["refs"]
    client = client_for(user)
    _seen(client)  # filled
    assert client.post(f"/api/v1/inbox/{refs[0]}/read/").status_code == 204
    assert client.post("/api/v1/inbox/read-all/").status_code == 200
    assert client.put("/api/v1/me/preferences/", {"muted_categories": ["system"]}, format="json").status_code == 200
    assert _notes(server, user.pk) == {}
    # Nor does one that changed nothing (an unknown item: nothing committed).
    assert client.post("/api/v1/inbox/m999999/read/").status_code == 404
    assert _notes(server, user.pk) == {}


def test_a_write_whose_process_died_before_redis_is_read_back_after_the_grace(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process commits the mark and dies before its Redis half: Redis
    keeps the user's part without the mark, but the note the write left in
    the user's state hash outlives it. Within the grace the writer may still
    be at work, so Redis answers as it is; past it the next read fills the
    user again from PostgreSQL, which has the mark."""
    user, server, refs = world["users"][2], world["server"], world["refs"]
    client = client_for(user)

    def read_flags() -> dict[str, bool]:
        return {row[0]: row[1] for row in _seen(client)[0]}

    assert read_flags()[refs[0]] is False
    dropped: list[Any] = []
    with monkeypatch.context() as dying:
        dying.setattr(transaction, "on_commit", lambda func, *_a, **_k: dropped.append(func))
        mc_services.inbox_mark_read(user=user, item_id=refs[0])
    assert dropped  # the Redis half and the note's end never ran
    notes = _notes(server, user.pk)
    assert notes.pop(b"w") == b"1"
    assert len(notes) == 1

    assert read_flags()[refs[0]] is False  # within the grace
    later = timezone.now() + timedelta(milliseconds=WRITE_GRACE_MS + 1)
    monkeypatch.setattr(timezone, "now", lambda: later)
    assert read_flags()[refs[0]] is True
    assert _notes(server, user.pk) == {}  # the fill did not carry a dead writer's note over
    assert not inbox_list(user=user, limit=50).degraded


def test_a_fill_carries_the_notes_of_writes_in_flight_over(world: dict[str, Any]) -> None:
    """A write noted before a fill may commit after the fill read PostgreSQL:
    its note survives the fill's drop, and goes when the write ends."""
    user, server = world["users"][2], world["server"]
    token = fill._write_begin(user.pk)
    assert token is not None
    assert inbox_fill(user_id=user.pk)
    notes = _notes(server, user.pk)
    assert notes == {b"w": b"1", f"w:{token}".encode(): notes[f"w:{token}".encode()]}
    fill._write_end(user.pk, token)
    assert _notes(server, user.pk) == {}
    fill._write_end(user.pk, token)  # a second end moves nothing
    assert _notes(server, user.pk) == {}


def test_a_mark_of_a_user_nobody_fills_needs_no_redis(world: dict[str, Any]) -> None:
    """An unfilled user's mark is committed and its Redis half dropped: the fill reads it back."""
    user, server, refs = world["users"][2], world["server"], world["refs"]
    _lose_and_rebuild(server)
    mc_services.inbox_mark_read(user=user, item_id=refs[0])  # places the item by filling the user first
    assert OutboxEntry.objects.filter(user_id=user.pk).count() == 0
    server.client().hdel(mc_keys.inbox_state(user.pk), "fill")  # evicted, say
    mc_services.inbox_mark_read(user=user, item_id=refs[1], now=timezone.now() + timedelta(seconds=1))
    assert OutboxEntry.objects.filter(user_id=user.pk).count() == 0
    page = inbox_list(user=user, limit=50)
    read = {item.id: item.read for item in page.results}
    assert read[refs[0]] is True
    assert read[refs[1]] is True


def test_a_user_filled_for_an_older_generation_is_filled_again(world: dict[str, Any]) -> None:
    """A stale copy of Redis (a failover to an older replica) holds users filled for
    another generation: they are filled again rather than trusted."""
    user, server, refs = world["users"][0], world["server"], world["refs"]
    client = client_for(user)
    before = _seen(client)
    state = mc_keys.inbox_state(user.pk)
    assert server.client().hget(state, "fill")  # filled by the world's reads
    server.client().hset(state, "fill", "0")
    # The stale copy lost the read mark PostgreSQL has.
    server.client().delete(*server.client().scan_iter(match=f"*{keys.user_tag(user.pk)}*read*"))
    assert _seen(client) == before
    assert server.client().hget(state, "fill") == str(healing.user_generation()).encode()
    assert dict((r[0], r[1]) for r in _seen(client)[0])[refs[0]] is True


def test_an_idle_user_leaves_redis_and_comes_back_on_their_next_read(world: dict[str, Any]) -> None:
    user, server = world["users"][0], world["server"]
    client = client_for(user)
    before = _seen(client)
    state = mc_keys.inbox_state(user.pk)
    # Each checked read gives the state hash the idle time again.
    server.client().pexpire(state, 5_000)
    _seen(client)
    idle_ms = settings.MESSAGECENTER_USER_IDLE_SECONDS * 1000
    assert idle_ms - 60_000 < server.client().pttl(state) <= idle_ms
    other = world["users"][1]
    _seen(client_for(other))
    assert fill.inbox_idle_drop() == 0  # everyone is filled

    server.client().delete(state)  # what the idle expiry (or an eviction) does
    assert fill.inbox_idle_drop() == 1
    assert not _part_keys(server, user.pk)
    assert _part_keys(server, other.pk)
    assert not server.client().sismember(mc_keys.filled_users(), user.pk)

    assert _seen(client) == before
    assert server.client().sismember(mc_keys.filled_users(), user.pk)


def test_a_group_whose_row_expired_is_filled_again_by_the_next_read_or_mark(
    healing_on: RedisServer, operator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The row of a group expires; no expiry job runs. A committed mark's Redis
    half that meets it changes nothing and drops the user's part; the next read
    fills the user from PostgreSQL, where the group re-forms around its newest
    item left; a "read all" then reads it whole."""
    now = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: now)
    user = UserFactory()
    plain = _send(operator, [user.pk], "plain")
    grouped = []
    for actor in ["Ann", "Ben", "Cat"]:
        now += timedelta(seconds=1)
        extra = {"expire_at": now + timedelta(minutes=5)} if actor == "Cat" else {}
        grouped.append(_send(operator, [user.pk], actor, group_key="order:9", actor=actor, **extra))
    assert rebuild.rebuild() is not None
    client = client_for(user)
    assert _seen(client) == ([(grouped[2], False, 3), (plain, False, None)], [], 2)

    now += timedelta(minutes=6)
    at_ms = int(now.timestamp() * 1000)
    fill.mark_applied(user.pk, lambda: inbox_rm.inbox_read_all(user_id=user.pk, category=None, now_ms=at_ms))
    assert healing_on.client().hget(mc_keys.inbox_state(user.pk), "fill") is None  # the part went
    assert _seen(client) == ([(grouped[1], False, 2), (plain, False, None)], [], 2)
    assert not inbox_list(user=user, limit=50).degraded
    assert client.post("/api/v1/inbox/read-all/").status_code == 200
    assert _seen(client) == ([(grouped[1], True, 2), (plain, True, None)], [], 0)
