"""The domain's error family. Services raise these; the API's exception
handler renders them as the API's error envelope, pages as form errors."""

from typing import Any

import psycopg
from django.db import InterfaceError, OperationalError

from core.breaker import RedisPoolExhausted

_OUTAGE_ERRORS = (OperationalError, InterfaceError, psycopg.OperationalError, psycopg.InterfaceError)


class ApplicationError(Exception):
    """Base of every domain error: a stable ``code``, a human ``message``."""

    status_code = 400
    code = "invalid"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        fields: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.fields = fields


class ValidationFailed(ApplicationError):
    status_code = 400
    code = "invalid"


class TooManyAttempts(ApplicationError):
    """Sign-in attempts over the limit for this username or address."""

    status_code = 429
    code = "throttled"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class NotFound(ApplicationError):
    """Absent, or not addressed to the caller: the two are never told apart."""

    status_code = 404
    code = "not_found"


class PermissionDenied(ApplicationError):
    status_code = 403
    code = "permission_denied"


class Conflict(ApplicationError):
    status_code = 409
    code = "conflict"


class LimitExceeded(ApplicationError):
    """A value outside what the read model supports (for example a bitmap
    offset past 2^32 - 1): refused before it reaches Redis."""

    status_code = 400
    code = "out_of_range"


def is_database_outage(exc: BaseException | None) -> bool:
    """True for errors meaning PostgreSQL cannot be reached or the connection
    died (as opposed to a query bug): Django's wrapped ones and psycopg's own,
    which escape Django's wrapper when they come from the pool or a connect."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, _OUTAGE_ERRORS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def is_unavailable(exc: BaseException | None) -> bool:
    """True for errors that answer 503 (the request was fine, the service is
    not, a retry may work): a PostgreSQL outage, or no Redis connection free
    in this process's bounded pool within its timeout (an overload)."""
    if is_database_outage(exc):
        return True
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, RedisPoolExhausted):
            return True
        exc = exc.__cause__ or exc.__context__
    return False
