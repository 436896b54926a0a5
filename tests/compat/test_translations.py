"""The app's pages and admin in the reader's language: its strings are in the
project's catalogues (tests/core/test_translations.py checks every entry is
translated and compiled)."""

from typing import Any

import pytest
from django.test import Client
from django.utils import translation

from notifications.models import Notification
from notifications.signals import notify

pytestmark = pytest.mark.django_db(transaction=True)

CHINESE: dict[str, Any] = {"HTTP_ACCEPT_LANGUAGE": "zh-Hans"}


def _page(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_list_pages_speak_the_readers_language(operator: Any, recipient: Any) -> None:
    page = _page(recipient)
    assert "No notifications." in page.get("/inbox/notifications/").content.decode()
    assert "没有通知。" in page.get("/inbox/notifications/", **CHINESE).content.decode()

    notify.send(operator, recipient=recipient, verb="approved", action_object=recipient, target=operator)
    english = page.get("/inbox/notifications/").content.decode()
    chinese = page.get("/inbox/notifications/", **CHINESE).content.decode()
    assert "<strong>olivia-operator</strong> approved alice on olivia-operator" in english
    assert "Mark as read" in english
    assert " ago</time>" in english
    assert "<strong>olivia-operator</strong> 在 olivia-operator approved alice" in chinese
    assert "标为已读" in chinese
    assert "删除" in chinese
    assert "前</time>" in chinese
    assert "Mark as read" not in chinese

    Notification.objects.filter(recipient=recipient).mark_all_as_read()
    assert "标为未读" in page.get("/inbox/notifications/", **CHINESE).content.decode()


def test_a_notification_reads_as_a_sentence_in_chinese(operator: Any, recipient: Any) -> None:
    row = notify.send(operator, recipient=recipient, verb="approved", target=operator)[0][1][0]
    with translation.override("zh-hans"):
        # Full-width brackets around the time, as Chinese text sets them.
        assert str(row).startswith("olivia-operator approved olivia-operator\uff08")
        assert str(row).endswith("前\uff09")


def test_the_admin_speaks_the_readers_language(operator: Any, recipient: Any) -> None:
    notify.send(operator, recipient=recipient, verb="approved", level="warning")
    admin = _page(operator)
    listing = admin.get("/admin/notifications/notification/", **CHINESE).content.decode()
    assert "将所选通知标为未读" in listing
    assert "警告" in listing  # the level column
    assert "接收者" in listing
