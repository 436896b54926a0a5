"""What the project's e-mails share: absolute links and the list of items
(``messagecenter/email/_items.html``) that digests and unread reminders show."""

from collections.abc import Callable, Sequence
from typing import Any

from django.conf import settings
from django.urls import reverse

from messagecenter.labels import CATEGORY_LABELS


def absolute_url(path: str) -> str:
    return settings.MESSAGECENTER_SITE_URL.rstrip("/") + path


def email_items(items: Sequence[Any], *, ref: Callable[[Any], str]) -> list[dict[str, Any]]:
    """What an e-mail's item list (email/_items.html) shows of each item; ``ref``
    gives the id its page is reached by."""
    return [
        {
            "title": item.title,
            "summary": item.summary,
            "category": str(CATEGORY_LABELS.get(item.category, item.category)),
            "created_at": item.created_at,
            "url": absolute_url(reverse("messagecenter:item", args=[ref(item)])),
        }
        for item in items
    ]
