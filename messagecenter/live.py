"""Live inbox: server-sent event streams and the counts with their ETag (read use cases).

One stream per signed-in page. It hears the user's channel and the
broadcast channels of everyone and of the user's platforms (``live.transport``,
the transport) and forwards each change as an ``inbox`` event; the page then
refetches its counts (and the inbox list). Two flavours of the same stream:
a blocking iterator for WSGI servers and an async one, served by the
process's hub, for ASGI servers.
"""

import hashlib
import json
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from redis.exceptions import RedisError

from live import transport as live
from messagecenter import selectors

# The SSE event name a change reaches the inbox page under (static/js/app.js listens for it).
INBOX_EVENT = "inbox"


def inbox_counts_with_etag(*, user: AbstractBaseUser) -> tuple[dict[str, Any], str]:
    """The user's counts (``selectors.inbox_counts``) and their ETag, in the
    counts' own round trip (none when the process holds them)."""
    answer = selectors.inbox_counts(user=user)
    return answer, counts_etag(user_id=int(user.pk), answer=answer)


def counts_etag(*, user_id: int, answer: dict[str, Any]) -> str:
    """A weak ETag of the counts answer itself: the same answer gives the same
    tag, any other answer another one. The counts are exact when read (expiry,
    wakes, publish and display times included), so the tag needs no reads of
    its own and no time bucket, and a 304 is sent exactly when the body would
    have been the same. The user id keeps two users' equal counts apart."""
    body = json.dumps(answer, sort_keys=True, separators=(",", ":")).encode()
    return f'W/"{user_id}.{hashlib.blake2b(body, digest_size=12).hexdigest()}"'


def live_available() -> bool:
    return live.available()


def live_ready(*, user: AbstractBaseUser) -> bool:
    """Whether a stream can start now (Redis answers); otherwise pages poll."""
    try:
        live.user_version(user_id=int(user.pk))
    except RedisError:
        return False
    return True


def inbox_event_stream(*, user_id: int, platforms: Iterable[str] = ()) -> Iterator[bytes]:
    """Blocking stream (WSGI) of the user's inbox changes and the broadcasts
    (everyone's and the user's platforms') that can change what the user sees."""
    return live.event_stream(user_id=user_id, event=INBOX_EVENT, platforms=platforms)


def inbox_event_stream_async(*, user_id: int, platforms: Iterable[str] = ()) -> AsyncIterator[bytes]:
    """The same stream on an event loop (ASGI), through the process's hub."""
    return live.event_stream_async(user_id=user_id, event=INBOX_EVENT, platforms=platforms)
