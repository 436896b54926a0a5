"""Helpers for the announcement tests: a fixed clock and short-hand creators."""

from datetime import UTC, datetime, timedelta
from typing import Any

from accounts.services import user_set_platforms
from notices import readmodel
from notices.models import Announcement
from notices.services import announcement_create

# Far enough ahead that nothing created in a test has expired by wall-clock
# time (indexes leave out announcements already expired when they are built).
T0 = datetime(2100, 1, 1, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def announce(
    platforms: list[str] | None = None,
    *,
    title: str = "Hello",
    publish_at: datetime | None = T0,
    expire_at: datetime | None = None,
    pinned: bool = False,
    body_html: str = "<p>Body text</p>",
    author: Any = None,
) -> Announcement:
    return announcement_create(
        author=author,
        title=title,
        body_html=body_html,
        platforms=platforms or ["user"],
        publish_at=publish_at,
        expire_at=expire_at,
        pinned=pinned,
    )


def on_platforms(user: Any, *platforms: str) -> Any:
    user_set_platforms(user=user, platforms=list(platforms))
    return user


def read_bit(platform: str, announcement_id: int, user_id: int) -> bool:
    """The user's read bit of the announcement on the platform, as the read model holds it."""
    return readmodel.read_bits(platform=platform, announcement_id=announcement_id, user_ids=[user_id])[0]
