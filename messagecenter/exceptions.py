"""Errors of the message centre, in the core family (rendered by the API's one handler)."""

from core.api.errors import ApplicationError


class InboxUnavailable(ApplicationError):
    """Something only the Redis read model knows is asked for while Redis is down.

    Inbox reads and marks do not raise it any more: reads answer from
    PostgreSQL (``messagecenter.fallback``) and marks are committed there, the
    user's part in Redis recorded stale (``messagecenter.fill.part_stale``).
    Read statistics (first reads per hour, ever-read bitmaps) live in Redis
    alone, so those answer 503 rather than guess.
    """

    status_code = 503
    code = "unavailable"
