"""Redis key names of the activity bitmaps (insight/activity.py), built on ``core.keys``."""

from core.keys import key

# Activity bitmaps (insight/activity.py). The user id space is cut into chunks of
# MESSAGECENTER_BITMAP_CHUNK_USERS ids and each chunk has its own hash tag: every
# BITOP (a week's union, a retention intersection) meets days of one chunk only,
# so it runs on one Redis Cluster slot, while the chunks (and a year of days of a
# large user base) spread over the masters. One tag for all activity keys would
# also work for BITOP, but would put every day of every user on one node.


def activity_tag(chunk: int) -> str:
    return f"{{a{int(chunk)}}}"


def activity_day(chunk: int, day: str) -> str:
    """bitmap: bit = user id minus the chunk's first id; 1 = the user was active on
    ``day`` (``yyyymmdd``, UTC). Expires after MESSAGECENTER_ACTIVITY_KEEP_DAYS."""
    return key("activity", activity_tag(chunk), "day", day)


def activity_scratch(chunk: int, nonce: str) -> str:
    """bitmap: a BITOP's result, counted and deleted in the same pipeline (short expiry
    in case the DEL is lost). Same tag as the chunk's days."""
    return key("activity", activity_tag(chunk), "tmp", nonce)
