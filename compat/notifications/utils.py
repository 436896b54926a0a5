"""Slugs in the incumbent's URLs: the id shifted by a constant, so that links
in old e-mails and pages keep resolving to the same notification."""

SLUG_OFFSET = 110909


def id2slug(notification_id: int) -> int:
    return int(notification_id) + SLUG_OFFSET


def slug2id(slug: int | str) -> int:
    return int(slug) - SLUG_OFFSET
