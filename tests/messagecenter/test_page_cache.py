"""The API's page cache: a polled first page is served as stored while
the inbox scripts find its tag current, and every change a page shows makes it stale.

Each case primes the cache, makes one change, and holds the API's answer equal
to a page computed from scratch (the selector, rendered the same way).
"""

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from core.lua import LuaScript
from messagecenter import keys as mc_keys
from messagecenter import projection, selectors, services
from messagecenter.apis import inbox as inbox_api
from messagecenter.models import Message, MessageResponse
from messagecenter.readmodel import inbox as inbox_readmodel
from messagecenter.readmodel.scripts import INBOX_SCRIPTS
from tests.conftest import client_for, round_trips
from tests.messagecenter.conftest import make_group, send

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.not_on_cluster(reason="the page cache rides the single-Redis fast path (a cluster plans every read)"),
]


_render = inbox_api.render_page  # the real one: the fixture below counts the API's calls


def _fresh(user: Any, **query: Any) -> bytes:
    return _render(selectors.inbox_list(user=user, **query))


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times the API rendered a page (a cache hit renders nothing)."""
    count = [0]
    real = inbox_api.render_page

    def counting(page: Any) -> bytes:
        count[0] += 1
        return real(page)

    monkeypatch.setattr(inbox_api, "render_page", counting)
    return count


def _get(client: Any, query: str = "") -> bytes:
    response = client.get(f"/api/v1/inbox/{query}")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    return bytes(response.content)


def test_a_polled_first_page_is_rendered_once(operator: Any, recipient: Any, renders: list[int], redis: Any) -> None:
    send(operator, to={"users": [recipient]}, title="one")
    client = client_for(recipient)
    _get(client)  # plans: no cache yet
    first = _get(client)  # the fast path computes and stores
    before = renders[0]
    assert _get(client) == first == _fresh(recipient)
    assert _get(client) == first
    assert renders[0] == before  # served as stored
    assert 0 < redis.ttl(mc_keys.inbox_pages(recipient.pk)) <= 300
    # Each query has its own entry; pages after the first (cursor) are never cached.
    assert _get(client, "?limit=1&unread=true") == _fresh(recipient, limit=1, unread_only=True)
    assert set(redis.hkeys(mc_keys.inbox_pages(recipient.pk))) == {b"|0|20", b"|0|20#", b"|1|1", b"|1|1#"}


@pytest.fixture
def scripts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times the read model ran one of the inbox scripts (alone or in a pipeline)."""
    count = [0]
    inbox_scripts = {id(script) for script in INBOX_SCRIPTS}
    real_call, real_queue = LuaScript.__call__, LuaScript.queue

    def calling(self: LuaScript, *args: Any, **kwargs: Any) -> Any:
        count[0] += id(self) in inbox_scripts
        return real_call(self, *args, **kwargs)

    def queueing(self: LuaScript, *args: Any, **kwargs: Any) -> Any:  # a call sent in a pipeline
        count[0] += id(self) in inbox_scripts
        return real_queue(self, *args, **kwargs)

    monkeypatch.setattr(LuaScript, "__call__", calling)
    monkeypatch.setattr(LuaScript, "queue", queueing)
    return count


def test_a_polled_page_is_checked_without_the_script(
    operator: Any, recipient: Any, renders: list[int], scripts: list[int]
) -> None:
    send(operator, to={"users": [recipient]}, title="one")
    client = client_for(recipient)
    _get(client)
    stored = _get(client)  # the script computes the page and the API stores it
    before = (renders[0], scripts[0])
    with round_trips() as polled_trips:
        polled = _get(client)
    # No script and no rendering: the tag the script wrote equals the one the
    # check builds from plain reads (the two are in step).
    assert (renders[0], scripts[0]) == before
    assert polled == stored == _fresh(recipient)
    # A process that never served the page lets the script check it: it is
    # served as stored too, in as many round trips (the request's others are
    # the session's user and the throttle's history).
    inbox_readmodel.cache_hints.clear()
    scripts_before = scripts[0]
    with round_trips() as script_trips:
        assert _get(client) == stored
    assert scripts[0] == scripts_before + 1
    assert renders[0] == before[0]
    assert polled_trips == script_trips
    # The script's hit leaves the hint: the next poll skips the script again.
    with round_trips() as again:
        assert _get(client) == stored
    assert scripts[0] == scripts_before + 1
    assert again == polled_trips


def _mark_read(ctx: dict[str, Any]) -> None:
    services.inbox_mark_read(user=ctx["user"], item_id=ctx["message"].ref)


def _mark_unread(ctx: dict[str, Any]) -> None:
    _mark_read(ctx)
    ctx["prime"]()
    services.inbox_mark_unread(user=ctx["user"], item_id=ctx["message"].ref)


def _hide(ctx: dict[str, Any]) -> None:
    services.inbox_hide(user=ctx["user"], item_id=ctx["message"].ref)


def _read_all(ctx: dict[str, Any]) -> None:
    services.inbox_mark_all_read(user=ctx["user"])


def _seen(ctx: dict[str, Any]) -> None:
    services.inbox_mark_seen(user=ctx["user"])


def _push(ctx: dict[str, Any]) -> None:
    send(ctx["operator"], to={"users": [ctx["user"]]}, title="pushed")


def _everyone(ctx: dict[str, Any]) -> None:
    send(ctx["operator"], to={"everyone": True}, title="for everyone")


def _retract(ctx: dict[str, Any]) -> None:
    services.message_retract(message=ctx["message"], actor=ctx["operator"])


def _answer(ctx: dict[str, Any]) -> None:
    asks = send(ctx["operator"], to={"users": [ctx["user"]]}, title="asks", actions=[{"id": "yes", "label": "Yes"}])
    ctx["prime"]()
    # The answer's row and its mirror alone, as message_respond commits them
    # before it marks the item read (a mark of its own makes the page stale).
    MessageResponse.objects.create(message=asks, user=ctx["user"], action="yes", at=ctx["clock"].now)
    projection.responses_changed(ctx["user"].pk, [asks.pk])


def _edit_message(ctx: dict[str, Any]) -> None:
    message = Message.objects.get(pk=ctx["message"].pk)
    message.title = "edited title"
    message.save()


def _bulletin(ctx: dict[str, Any]) -> None:
    services.bulletin_create(title="news", body_html="", display_time=ctx["clock"].now)


def _edit_bulletin(ctx: dict[str, Any]) -> None:
    services.bulletin_update(bulletin=ctx["bulletin"], data={"title": "news, edited"})


def _leave_group(ctx: dict[str, Any]) -> None:
    services.user_group_remove_members(group=ctx["group"], user_ids=[ctx["user"].pk])


def _join_group(ctx: dict[str, Any]) -> None:
    # A group of the user's with a bulletin, and nothing of it in the inbox yet:
    # joining adds no item, only what the next merge shows.
    other = make_group("later")
    services.bulletin_create(title="for later", body_html="", display_time=ctx["clock"].now, group_ids=[other.pk])
    ctx["prime"]()
    services.user_group_add_members(group=other, user_ids=[ctx["user"].pk])


def _scheduled_bulletin_shows(ctx: dict[str, Any]) -> None:
    services.bulletin_create(title="later", body_html="", display_time=ctx["clock"].now + timedelta(minutes=5))
    ctx["prime"]()
    ctx["clock"].advance(minutes=6)


def _expiry(ctx: dict[str, Any]) -> None:
    send(ctx["operator"], to={"users": [ctx["user"]]}, title="brief", expire_at=ctx["clock"].now + timedelta(minutes=5))
    ctx["prime"]()
    ctx["clock"].advance(minutes=6)


def change_scene(*, operator: Any, user: Any, clock: Any) -> dict[str, Any]:
    """What the changes act on: the user in a group with a bulletin, and a message
    pushed to them a minute ago. The test adds ``prime`` (read, so it is cached)."""
    group = make_group("staff", user)
    bulletin = services.bulletin_create(title="group news", body_html="", display_time=clock.now, group_ids=[group.pk])
    message = send(operator, to={"users": [user]}, title="kept")
    clock.advance(minutes=1)
    return {
        "user": user,
        "operator": operator,
        "message": message,
        "bulletin": bulletin,
        "group": group,
        "clock": clock,
    }


CHANGES: dict[str, Callable[[dict[str, Any]], None]] = {
    "read": _mark_read,
    "unread": _mark_unread,
    "hide": _hide,
    "read all": _read_all,
    "seen": _seen,
    "push delivery": _push,
    "pull item for everyone": _everyone,
    "retraction": _retract,
    "answer to an action": _answer,
    "message edit": _edit_message,
    "new bulletin": _bulletin,
    "bulletin edit": _edit_bulletin,
    "group left": _leave_group,
    "group joined": _join_group,
    "scheduled bulletin shows": _scheduled_bulletin_shows,
    "item expires": _expiry,
}


# --- the counts, kept in the same read cache ------------------------------------------------


def _counts(client: Any) -> dict[str, Any]:
    response = client.get("/api/v1/inbox/counts/")
    assert response.status_code == 200
    return dict(response.json())


def _fresh_counts(user: Any) -> dict[str, Any]:
    """The counts computed by the script, as a process without a hint would
    (the hint is put back as it was: the API's next read checks as before)."""
    hint = (user.pk, inbox_readmodel.COUNTS_FIELD)
    held = hint in inbox_readmodel.cache_hints
    inbox_readmodel.cache_hints.pop(hint)
    try:
        return selectors.inbox_counts(user=user)
    finally:
        inbox_readmodel.cache_hints.pop(hint)
        if held:
            inbox_readmodel.cache_hints[hint] = True


def test_polled_counts_are_checked_without_the_inbox_script(
    operator: Any, recipient: Any, scripts: list[int], redis: Any
) -> None:
    send(operator, to={"users": [recipient]}, title="one")
    send(operator, to={"users": [recipient]}, title="two", category="promotion")
    client = client_for(recipient)
    _counts(client)  # plans
    stored = _counts(client)  # the fast script computes them and keeps them
    assert redis.hget(mc_keys.inbox_pages(recipient.pk), "counts") is not None
    before = scripts[0]
    with round_trips() as polled_trips:
        polled = _counts(client)
    assert scripts[0] == before  # the read cache's check (and count.lua) only
    assert polled == stored == _fresh_counts(recipient)
    assert polled["by_category"]["system"] == polled["by_category"]["promotion"] == 1
    # Without the hint the script answers, in as many round trips.
    inbox_readmodel.cache_hints.clear()
    with round_trips() as script_trips:
        assert _counts(client) == stored
    assert scripts[0] == before + 2  # + 1: _fresh_counts above
    assert polled_trips == script_trips


@pytest.mark.parametrize("read", ["page", "counts"])
@pytest.mark.parametrize("change", list(CHANGES))
def test_every_change_makes_the_cached_read_stale(
    change: str, read: str, operator: Any, recipient: Any, clock: Any, renders: list[int], scripts: list[int]
) -> None:
    """The first page and the counts are kept in the same read cache: primed,
    then one change, then the API's answer equals one computed from scratch."""
    ctx = change_scene(operator=operator, user=recipient, clock=clock)
    client = client_for(recipient)
    # The API's answer, one computed from scratch, and what counts a computation.
    get, fresh, computed = {
        "page": (lambda: _get(client), lambda: _fresh(recipient), renders),
        "counts": (lambda: _counts(client), lambda: _fresh_counts(recipient), scripts),
    }[read]

    def prime() -> None:
        get()
        get()
        before = computed[0]
        get()
        assert computed[0] == before, f"primed: the {read} come(s) from the cache"
        ctx["before"] = fresh()

    ctx["prime"] = prime
    prime()
    CHANGES[change](ctx)
    after = get()
    assert after == fresh()
    if read == "page":
        assert after != ctx["before"], "the change shows on the page"
    assert get() == after  # and the new answer is what gets cached next


def test_the_scripts_take_the_tag_from_its_one_definition() -> None:
    """readcache.TAG is the tag's shape for both sides: the cached scripts get
    its names and separators as constants, and the check reads every part."""
    from messagecenter.readmodel import readcache, scripts

    head = 'local CACHE_TAG = {"' + '", "'.join(part.name for part in readcache.TAG) + '"}'
    for script in (scripts.PAGE_SCRIPT, scripts.COUNTS_SCRIPT):
        assert script.source.startswith(head)
        assert f'local CACHE_JOIN = "{readcache.JOIN}"' in script.source
    read = [key for command in readcache.check_commands(7, "f")[2:-1] for key in command[1:]]
    for part in readcache.TAG:
        assert part.key(7) in read
        assert part.field is None or part.field in read
