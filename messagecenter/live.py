"""Live inbox: server-sent event streams and the counts ETag (read use cases).

One stream per signed-in page. It subscribes to the user's channel
(``readmodel.live``) and forwards each change as an ``inbox`` event; the page
then refetches its counts (and the inbox list). A stream lives at most
``MESSAGECENTER_LIVE_STREAM_SECONDS`` and sends a comment line every
``MESSAGECENTER_LIVE_HEARTBEAT_SECONDS``: the heartbeat lets a server notice a
closed connection, and the cap hands a WSGI worker thread back (the browser
reconnects after the ``retry`` hint). Two flavours of the same stream: a
blocking iterator for WSGI servers and an async one for ASGI servers (Django
buffers an iterator of the other flavour whole, which would defeat streaming).
"""

import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone
from redis.exceptions import RedisError

from messagecenter.readmodel import live, to_ms

RETRY_MS = 3000


def _stream_seconds() -> float:
    return float(settings.MESSAGECENTER_LIVE_STREAM_SECONDS)


def _heartbeat_seconds() -> float:
    return float(settings.MESSAGECENTER_LIVE_HEARTBEAT_SECONDS)


def inbox_counts_etag(*, user: AbstractBaseUser) -> str:
    """The ETag of the user's counts as they are now (see ``readmodel.live.counts_etag``)."""
    return live.counts_etag(user_id=int(user.pk), now_ms=to_ms(timezone.now()))


def live_available() -> bool:
    return live.available()


def live_ready(*, user: AbstractBaseUser) -> bool:
    """Whether a stream can start now (Redis answers); otherwise pages poll."""
    try:
        live.user_version(user_id=int(user.pk))
    except RedisError:
        return False
    return True


def sse_frame(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _opening(version: int) -> bytes:
    # The version lets a page that reconnects refresh once if it missed events.
    return f"retry: {RETRY_MS}\n\n".encode() + sse_frame("hello", {"v": version})


HEARTBEAT = b": keepalive\n\n"


def inbox_event_stream(*, user_id: int) -> Iterator[bytes]:
    """Blocking stream (WSGI). Subscribes before reading the version, so no event falls in between."""
    deadline = time.monotonic() + _stream_seconds()
    heartbeat = _heartbeat_seconds()
    with live.subscribe(user_id=user_id) as pubsub:
        yield _opening(live.user_version(user_id=user_id))
        while (remaining := deadline - time.monotonic()) > 0:
            message = pubsub.get_message(timeout=min(heartbeat, remaining))
            event = live.decode_event(message)
            yield HEARTBEAT if event is None else sse_frame("inbox", event)


async def inbox_event_stream_async(*, user_id: int) -> AsyncIterator[bytes]:
    """The same stream on an event loop (ASGI): no thread is held while it waits."""
    from asgiref.sync import sync_to_async

    deadline = time.monotonic() + _stream_seconds()
    heartbeat = _heartbeat_seconds()
    async with live.subscribe_async(user_id=user_id) as pubsub:
        version = await sync_to_async(live.user_version, thread_sensitive=False)(user_id=user_id)
        yield _opening(version)
        while (remaining := deadline - time.monotonic()) > 0:
            message = await pubsub.get_message(timeout=min(heartbeat, remaining))
            event = live.decode_event(message)
            yield HEARTBEAT if event is None else sse_frame("inbox", event)
