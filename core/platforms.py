"""Which platforms a user is on: the default rule, in one place."""

from core.models import Platform

ALL_PLATFORMS: tuple[str, ...] = tuple(Platform.values)


def default_platforms(*, is_staff: bool) -> list[str]:
    """Staff users are operators by default, everyone else a plain user."""
    return [Platform.OPERATOR.value] if is_staff else [Platform.USER.value]
