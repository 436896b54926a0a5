"""The domain's error family. Services raise these; the API's exception
handler renders them as the API's error envelope, pages as form errors."""

from typing import Any

from django.utils.translation import gettext, gettext_noop

from core.breaker import RedisPoolExhausted
from core.replicas import caused_by, is_database_outage


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


def is_unavailable(exc: BaseException | None) -> bool:
    """True for errors that answer 503 (the request was fine, the service is
    not, a retry may work): a PostgreSQL outage, or no Redis connection free
    in this process's bounded pool within its timeout (an overload)."""
    return is_database_outage(exc) or caused_by(exc, (RedisPoolExhausted,))


# Messages the domain raises with a fixed text: catalogued here so that the
# handler can answer them in the request's language (LocaleMiddleware picks it
# from the language cookie or Accept-Language; English otherwise). Messages
# built with values inside stay English; DRF's own messages come translated.
TRANSLATED_MESSAGES = (
    gettext_noop("No such item in your inbox."),
    gettext_noop("Announcement not found."),
    gettext_noop("The cursor is not valid."),
    gettext_noop("The cursor belongs to another listing."),
    gettext_noop("limit must be a positive integer."),
    gettext_noop("Unknown category."),
    gettext_noop("Invalid input."),
    gettext_noop("The request body is too large."),
    gettext_noop("The service is briefly unavailable; please retry shortly."),
    gettext_noop("This item has no actions."),
    gettext_noop("You already answered this item."),
)


def error_body(code: str, message: str, fields: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if fields:
        error["fields"] = fields
    return {"error": error}


def unavailable_body() -> dict[str, Any]:
    """The 503 envelope of a PostgreSQL outage (the API's handler and the middleware)."""
    return error_body("service_unavailable", gettext("The service is briefly unavailable; please retry shortly."))
