"""Unread counts held in the process (``inbox.COUNTS_HELD``, core/tracking.py):
a repeated poll costs no round trip, and Redis's client tracking drops the
held answer as soon as anything it was read from changes.

Each change case holds the counts, makes one change *as another process
would* (this process's sends are not counted, so only Redis's invalidation
push can tell the held answer), and holds the next answer equal to one
computed from scratch. The same changes made by this process are covered
too: there the next poll first waits for Redis's PONG (a barrier).

They run on a private redis-server (see ``_tracking_redis``); on a cluster
held answers are off.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from config.settings.base import _redis_cache
from core import breaker
from core.breaker import reset_breakers
from core.selectors import user_platforms
from core.services import user_set_platforms
from messagecenter import live, selectors
from messagecenter.readmodel import inbox as inbox_readmodel
from notices import readmodel as notices_readmodel
from notices.services import announcement_create, announcement_mark_read
from notices.services import announcement_delete as notice_delete
from tests.conftest import client_for, round_trips
from tests.faults.conftest import RedisServer, start_private_server
from tests.messagecenter.conftest import send
from tests.messagecenter.test_page_cache import CHANGES as INBOX_CHANGES
from tests.messagecenter.test_page_cache import change_scene

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.redis_server,
    pytest.mark.not_on_cluster(reason="held answers need one Redis's client tracking (off on a cluster)"),
]

HELD = inbox_readmodel.COUNTS_HELD


@pytest.fixture(autouse=True)
def _tracking_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A private redis-server: the embedded pass's fakeredis has no client
    tracking, and on a shared server a FLUSHDB of another test process (any
    database) sends every tracking client an invalidation of everything."""
    HELD.clear()
    server = start_private_server(tmp_path)
    try:
        with override_settings(CACHES={**settings.CACHES, "default": _redis_cache(server.url)}):
            reset_breakers()
            notices_readmodel.clear_local_cache()
            yield server
    finally:
        HELD.clear()
        server.close()
        reset_breakers()
        notices_readmodel.clear_local_cache()


def _name(user: Any) -> tuple[Any, ...]:
    return (user.pk, tuple(user_platforms(user=user)))


def _fresh(user: Any) -> dict[str, Any]:
    """The counts computed by the scripts, nothing held or cached in the process."""
    hint = (user.pk, inbox_readmodel.COUNTS_FIELD)
    had = hint in inbox_readmodel._cache_hint
    inbox_readmodel._cache_hint.discard(hint)
    try:
        with override_settings(MESSAGECENTER_COUNTS_HELD=False):
            return selectors.inbox_counts(user=user)
    finally:
        inbox_readmodel._cache_hint.discard(hint)
        if had:
            inbox_readmodel._cache_hint.add(hint)


def _hold(user: Any) -> dict[str, Any]:
    """Poll until the answer is held; then a poll costs no round trip."""
    for _ in range(3):
        selectors.inbox_counts(user=user)
    with round_trips() as trips:
        answer = selectors.inbox_counts(user=user)
    assert trips == [0], "the third poll onwards is answered by the process"
    assert inbox_readmodel.counts_held_get(_name(user), _now_ms()) == (
        answer["unread"],
        answer["unseen"],
        tuple(answer["by_category"].items()),
    )
    return answer


def _now_ms() -> int:
    from django.utils import timezone

    from messagecenter.readmodel import to_ms

    return to_ms(timezone.now())


@contextmanager
def elsewhere() -> Iterator[None]:
    """Make a change as another process would: what this process sends meanwhile
    is not counted, so the next poll takes no barrier and only Redis's
    invalidation push can drop the held answer."""
    commands_done = breaker.traffic.commands_done
    try:
        yield
    finally:
        breaker.traffic.commands_done = commands_done


def test_a_repeated_poll_is_answered_by_the_process(operator: Any, recipient: Any) -> None:
    send(operator, to={"users": [recipient]}, title="one")
    send(operator, to={"users": [recipient]}, title="two", category="promotion")
    announcement_create(
        author=operator, title="A", body_html="<p>x</p>", platforms=["user"], publish_at=_past(), expire_at=None
    )
    answer = _hold(recipient)
    assert answer == _fresh(recipient)
    assert answer["by_category"]["system"] == answer["by_category"]["promotion"] == 1
    assert answer["by_category"]["announcement"] == 1
    # The API's poll too: its only round trips are the request's own (credential,
    # throttle), and the counts' PING after them (this process sent those).
    client = client_for(recipient)
    client.get("/api/v1/inbox/counts/")
    with round_trips() as api_trips:
        assert client.get("/api/v1/inbox/counts/").json() == answer
    with override_settings(MESSAGECENTER_COUNTS_HELD=False), round_trips() as unheld_trips:
        assert client.get("/api/v1/inbox/counts/").json() == answer
    assert api_trips == unheld_trips  # the PING in place of the read cache's check


def test_a_held_poll_and_its_etag_take_no_round_trip(operator: Any, recipient: Any) -> None:
    """The ETag comes from the held answer: a 304 poll costs nothing but the
    barrier after this process's own commands (the request's throttle)."""
    send(operator, to={"users": [recipient]})
    announcement_create(
        author=operator, title="A", body_html="<p>x</p>", platforms=["user"], publish_at=_past(), expire_at=None
    )
    answer = _hold(recipient)
    with round_trips() as trips:
        answer_again, etag = live.inbox_counts_with_etag(user=recipient)
    assert trips == [0]
    assert answer_again == answer
    assert etag == live.counts_etag(user_id=recipient.pk, answer=answer)
    client = client_for(recipient)
    assert client.get("/api/v1/inbox/counts/", HTTP_IF_NONE_MATCH=etag).status_code == 304


def _past() -> Any:
    from django.utils import timezone

    return timezone.now() - timedelta(hours=1)


# --- every change drops the held answer -------------------------------------------------------


def _announce(ctx: dict[str, Any], title: str, *, platform: str = "user", **times: timedelta) -> Any:
    """An announcement published ``after`` from the test's now (expiring ``lasts`` later)."""
    publish = ctx["clock"].now + times.get("after", timedelta(0))
    lasts = times.get("lasts")
    return announcement_create(
        author=ctx["operator"],
        title=title,
        body_html="<p>x</p>",
        platforms=[platform],
        publish_at=publish,
        expire_at=publish + lasts if lasts else None,
    )


def _announcement_published(ctx: dict[str, Any]) -> None:
    _announce(ctx, "new")


def _announcement_read(ctx: dict[str, Any]) -> None:
    announcement_mark_read(user=ctx["user"], announcement_id=ctx["announcement"].pk)


def _announcement_deleted(ctx: dict[str, Any]) -> None:
    notice_delete(announcement=ctx["announcement"])


def _announcement_expires(ctx: dict[str, Any]) -> None:
    _announce(ctx, "brief", lasts=timedelta(minutes=5))
    ctx["prime"]()
    ctx["clock"].advance(minutes=6)


def _announcement_scheduled_shows(ctx: dict[str, Any]) -> None:
    _announce(ctx, "later", after=timedelta(minutes=5))
    ctx["prime"]()
    ctx["clock"].advance(minutes=6)


def _platform_changed(ctx: dict[str, Any]) -> None:
    _announce(ctx, "for customers", platform="customer")
    ctx["prime"]()
    user_set_platforms(user=ctx["user"], platforms=["user", "customer"])


CHANGES: dict[str, Callable[[dict[str, Any]], None]] = {
    **INBOX_CHANGES,
    "announcement published": _announcement_published,
    "announcement read": _announcement_read,
    "announcement deleted": _announcement_deleted,
    "announcement expires": _announcement_expires,
    "scheduled announcement shows": _announcement_scheduled_shows,
    "platforms changed": _platform_changed,
}
# Changes that are the passing of time: no write, so no push to wait for.
BY_TIME = {"scheduled bulletin shows", "item expires", "announcement expires", "scheduled announcement shows"}


@pytest.mark.parametrize("by", ["another process", "this process"])
@pytest.mark.parametrize("change", list(CHANGES))
def test_every_change_drops_the_held_answer(change: str, by: str, operator: Any, recipient: Any, clock: Any) -> None:
    ctx = change_scene(operator=operator, user=recipient, clock=clock)
    ctx["announcement"] = announcement_create(
        author=operator, title="A", body_html="<p>x</p>", platforms=["user"], publish_at=clock.now
    )

    def prime() -> None:
        ctx["before"] = _hold(recipient)
        assert ctx["before"] == _fresh(recipient)
        selectors.inbox_counts(user=recipient)  # settles the fresh computation's sends: no barrier pending

    ctx["prime"] = prime
    prime()
    if by == "another process":
        with elsewhere():
            CHANGES[change](ctx)
        if change not in BY_TIME:
            # The push comes a moment after the write; a change that touched
            # nothing the answer was read from never sends one (then the held
            # answer must still be right).
            HELD.news(timeout=0.5)
    else:
        CHANGES[change](ctx)
    after = selectors.inbox_counts(user=recipient)
    assert after == _fresh(recipient), f"{change} ({by})"
    if change not in {"message edit", "bulletin edit"}:  # the two that change no count
        assert after != ctx["before"], "the change shows in the counts"
