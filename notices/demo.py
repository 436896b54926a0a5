"""Demo announcements: one pinned, one scheduled for next week, one for customers.

Idempotent: an announcement whose title exists is left alone.
"""

from datetime import timedelta
from typing import Any, TextIO

from django.contrib.auth import get_user_model
from django.utils import timezone

from notices.models import Announcement
from notices.services import announcement_create

DEMO_ANNOUNCEMENTS: list[dict[str, Any]] = [
    {
        "title": "Welcome to the message centre",
        "body_html": "<p>Announcements reach every user of a platform with <strong>one write</strong>. "
        "Pinned ones show as a banner until you open them.</p>",
        "platforms": ["user", "customer", "operator"],
        "pinned": True,
    },
    {
        "title": "Scheduled maintenance next week",
        "body_html": "<p>The service will be read-only for ten minutes during maintenance.</p>",
        "platforms": ["user", "customer"],
        "publish_in": timedelta(days=7),
    },
    {
        "title": "New customer portal",
        "body_html": '<p>Customers can now track orders in the <a href="https://example.com/portal">portal</a>.</p>',
        "platforms": ["customer"],
    },
]


def seed(stdout: TextIO) -> None:
    author = get_user_model().objects.filter(is_superuser=True).order_by("pk").first()
    for spec in DEMO_ANNOUNCEMENTS:
        if Announcement.objects.filter(title=spec["title"]).exists():
            continue
        fields = {k: v for k, v in spec.items() if k != "publish_in"}
        if "publish_in" in spec:
            fields["publish_at"] = timezone.now() + spec["publish_in"]
        announcement_create(author=author, **fields)
    stdout.write(f"  announcements: {len(DEMO_ANNOUNCEMENTS)} ({', '.join(a['title'] for a in DEMO_ANNOUNCEMENTS)})\n")
