"""Every Lua call of the read model gets all its keys in KEYS, and they map to one
slot (Redis Cluster refuses cross-slot scripts; fakeredis would not notice)."""

from collections.abc import Sequence
from typing import Any
from unittest import mock

import pytest
from django.test import override_settings
from redis.cluster import key_slot

from core.lua import LuaScript
from notices import keys as notice_keys
from notices.selectors import announcement_counts, announcement_list, announcement_stats
from notices.services import announcement_delete, announcement_mark_read, announcement_mark_unread, announcement_update
from tests.factories import UserFactory
from tests.notices.conftest import HOUR, T0, announce, on_platforms

pytestmark = pytest.mark.django_db(transaction=True)


@override_settings(MESSAGECENTER_NOTICE_CHUNK_USERS=4)
def test_every_script_call_stays_in_one_slot(redis: Any) -> None:
    calls: list[tuple[str, list[str]]] = []
    original = LuaScript.__call__

    def recording(self: LuaScript, keys: Sequence[str], args: Sequence[Any] = (), client: Any = None) -> Any:
        calls.append((self.path, list(keys)))
        return original(self, keys, args, client)

    original_queue = LuaScript.queue

    def queueing(self: LuaScript, pipe: Any, keys: Sequence[str], args: Sequence[Any] = ()) -> None:
        # A call queued on a single Redis's pipeline (the revision step of an add).
        calls.append((self.path, list(keys)))
        original_queue(self, pipe, keys, args)

    original_stream = LuaScript.stream

    def streaming(self: LuaScript, stream_calls: Any, client: Any = None) -> Any:
        # Calls sent together on a single Redis (an add's chunk calls).
        listed = list(stream_calls)
        calls.extend((self.path, list(keys)) for keys, _args in listed)
        return original_stream(self, listed, client)

    with (
        mock.patch.object(LuaScript, "__call__", recording),
        mock.patch.object(LuaScript, "queue", queueing),
        mock.patch.object(LuaScript, "stream", streaming),
    ):
        low, high = UserFactory(id=2), UserFactory(id=4 * 3 + 1)
        for user in (low, high):
            on_platforms(user, "user", "customer")
        a = announce(["user", "customer"], expire_at=T0 + HOUR)
        b = announce(["user"], publish_at=T0 - HOUR)
        for user in (low, high):
            announcement_counts(user=user, now=T0)
            announcement_mark_read(user=user, announcement_id=a.pk, now=T0)
            announcement_mark_unread(user=user, announcement_id=b.pk, now=T0)
            announcement_list(user=user, limit=5, now=T0)
        announcement_stats(announcement=a)
        announcement_update(announcement=a, platforms=["customer"])
        announcement_delete(announcement=b)

    scripts = {path.rsplit("/", 1)[-1] for path, _ in calls}
    # live.lua: a mark that changed a bit bumps the user's live version (one key).
    # add_revision.lua then add_chunk.lua: a publish adds to the built indexes (the revision, then each chunk).
    # cache_fill.lua: a list stores the summaries it read from PostgreSQL (entry and lock share the id's tag).
    assert scripts == {
        "cache_fill.lua",
        "read_state.lua",
        "snapshot.lua",
        "sync_chunk.lua",
        "mark.lua",
        "live.lua",
        "add_revision.lua",
        "add_chunk.lua",
    }
    tags_seen = set()
    for path, script_keys in calls:
        assert script_keys, path
        slots = {key_slot(k.encode()) for k in script_keys}
        assert len(slots) == 1, (path, script_keys)
        if "{" in script_keys[0]:  # the platform revision: one key, no tag
            tags_seen.add(script_keys[0].split("{", 1)[1].split("}", 1)[0])
    # Chunks and platforms live under their own tags, so they spread over a cluster.
    assert {"user", "customer", "user:3", "customer:3"} <= tags_seen


def test_no_scan_or_keys_command_on_the_hot_path(recipient: Any) -> None:
    announce(["user"])
    announcement_counts(user=recipient, now=T0)  # warm
    from core.redis import get_redis

    client = get_redis()
    with (
        mock.patch.object(type(client), "keys", side_effect=AssertionError("KEYS")),
        mock.patch.object(type(client), "scan", side_effect=AssertionError("SCAN")),
        mock.patch.object(type(client), "scan_iter", side_effect=AssertionError("SCAN")),
    ):
        assert announcement_counts(user=recipient, now=T0) == {"read": 0, "unread": 1}
        announcement_list(user=recipient, limit=5, now=T0)


def test_key_tags_differ_per_chunk_and_platform() -> None:
    tags = {notice_keys.tag(p, c) for p in ("user", "customer") for c in (0, 1, 2)}
    assert len(tags) == 6
    assert notice_keys.index("user", 0).endswith("notice:{user}:index")
    assert key_slot(notice_keys.index("user", 1).encode()) == key_slot(notice_keys.bitmap("user", 1, 7).encode())
