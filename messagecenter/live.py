"""Live inbox: server-sent event streams and the counts ETag (read use cases).

One stream per signed-in page. It hears the user's channel and the
broadcast channels of everyone and of the user's platforms (``core.live``,
the transport) and forwards each change as an ``inbox`` event; the page then
refetches its counts (and the inbox list). Two flavours of the same stream:
a blocking iterator for WSGI servers and an async one, served by the
process's hub, for ASGI servers.
"""

from collections.abc import AsyncIterator, Iterable, Iterator

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone
from redis.exceptions import RedisError

from core import live
from messagecenter.readmodel import to_ms
from messagecenter.readmodel.live import counts_etag

# The SSE event name a change reaches the inbox page under (static/js/app.js listens for it).
INBOX_EVENT = "inbox"


def inbox_counts_etag(*, user: AbstractBaseUser) -> str:
    """The ETag of the user's counts as they are now (see ``readmodel.live.counts_etag``)."""
    return counts_etag(user_id=int(user.pk), now_ms=to_ms(timezone.now()))


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
