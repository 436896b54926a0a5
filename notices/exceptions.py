"""Errors of announcements, in the core family (rendered by the API's one handler)."""

from core.api.errors import ApplicationError


class ReadStateUnavailable(ApplicationError):
    """Read state lives in Redis only (its durable copy is a later issue): with
    Redis down, marking and statistics answer 503 instead of guessing."""

    status_code = 503
    code = "unavailable"
