"""Errors of the message centre, in the core family (rendered by the API's one handler)."""

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from redis.exceptions import RedisError

from core.exceptions import ApplicationError

P = ParamSpec("P")
R = TypeVar("R")


class InboxUnavailable(ApplicationError):
    """The inbox lives in the Redis read model: with Redis down, inbox reads
    and marks answer 503 rather than guess (PostgreSQL alone cannot page an
    inbox without a row per user, which is the point of the design)."""

    status_code = 503
    code = "unavailable"


def read_model_required(func: Callable[P, R]) -> Callable[P, R]:
    """Turn a Redis failure inside an inbox use case into InboxUnavailable."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except RedisError as exc:
            raise InboxUnavailable("The inbox is temporarily unavailable; try again shortly.") from exc

    return wrapper
