"""Content in the reader's language: the creates' ``translations`` (messages,
notifications, bulletins, announcements), their read-back, and every read in
the reader's language (the preference, else Accept-Language, else the
default; a field left out falls back to the original), search included."""

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from messagecenter import services
from messagecenter.models import Bulletin, Message, Notification
from notices.models import Announcement
from tests.conftest import assert_error, client_for
from tests.notices.conftest import on_platforms

pytestmark = pytest.mark.django_db(transaction=True)

ZH = {"zh-hans": {"title": "请假申请", "body_html": "<p>两天<script>x</script></p>"}}
MESSAGES = "/api/v1/manage/messages/"


def _message(client: Any, users: list[Any], **extra: Any) -> str:
    body = {
        "category": "system",
        "title": "Leave request",
        "summary": "Two days off",
        "body_html": "<p>Two days</p>",
        "to": {"users": [u.pk for u in users]},
        **extra,
    }
    response = client.post(MESSAGES, body, format="json")
    assert response.status_code == 202, response.content
    return str(response.json()["id"])


def _zh(client: Any, path: str, **params: Any) -> Any:
    return client.get(path, params, HTTP_ACCEPT_LANGUAGE="zh-hans").json()


def test_message_translations_read_back_and_sanitised(operator: Any, recipient: Any) -> None:
    op = client_for(operator)
    message_id = _message(op, [recipient], translations=ZH)
    detail = op.get(f"{MESSAGES}{message_id}/").json()
    assert detail["translations"] == {"zh-hans": {"title": "请假申请", "body_html": "<p>两天</p>"}}
    assert op.get(f"{MESSAGES}{_message(op, [recipient])}/").json()["translations"] == {}


@pytest.mark.parametrize(
    "translations",
    [
        {"fr": {"title": "Demande"}},
        {"zh-hans": {"summary": "no title"}},
        {"zh-hans": {"title": ""}},
        {"zh-hans": {"title": "x", "colour": "red"}},
        {"zh-hans": {"title": 5}},
        {"zh-hans": {"title": "x" * 201}},
        {"zh-hans": "请假"},
        ["zh-hans"],
        "zh-hans",
    ],
)
def test_bad_translations_are_400_and_store_nothing(operator: Any, recipient: Any, translations: Any) -> None:
    op = client_for(operator)
    body = {"category": "system", "title": "t", "body_html": "b", "to": {"users": [recipient.pk]}}
    response = op.post(MESSAGES, {**body, "translations": translations}, format="json")
    assert_error(response, 400)
    assert "translations" in response.json()["error"]["fields"]
    assert not Message.objects.exists()
    bulletin = {"title": "t", "body_html": "b", "display_time": timezone.now().isoformat()}
    assert_error(op.post("/api/v1/manage/bulletins/", {**bulletin, "translations": translations}, format="json"), 400)
    assert not Bulletin.objects.exists()
    announcement = {"title": "t", "body_html": "b", "platforms": ["user"]}
    assert_error(
        op.post("/api/v1/manage/announcements/", {**announcement, "translations": translations}, format="json"), 400
    )
    assert not Announcement.objects.exists()


def test_inbox_reads_in_the_readers_language_with_fallback(operator: Any, recipient: Any) -> None:
    ref = "m" + _message(client_for(operator), [recipient], translations=ZH)
    alice = client_for(recipient)
    english = alice.get("/api/v1/inbox/").json()["results"][0]
    assert (english["title"], english["summary"]) == ("Leave request", "Two days off")
    chinese = _zh(alice, "/api/v1/inbox/")["results"][0]
    # The summary has no translation: the original shows.
    assert (chinese["title"], chinese["summary"]) == ("请假申请", "Two days off")
    detail = _zh(alice, f"/api/v1/inbox/{ref}/")
    assert (detail["title"], detail["body_html"]) == ("请假申请", "<p>两天</p>")
    assert alice.get(f"/api/v1/inbox/{ref}/").json()["body_html"] == "<p>Two days</p>"
    # The first page is cached per language: English again after Chinese.
    assert alice.get("/api/v1/inbox/").json()["results"][0]["title"] == "Leave request"


def test_the_preference_wins_over_accept_language(operator: Any, recipient: Any) -> None:
    ref = "m" + _message(client_for(operator), [recipient], translations=ZH)
    alice = client_for(recipient)
    assert alice.get(f"/api/v1/inbox/{ref}/").json()["title"] == "Leave request"
    assert alice.put("/api/v1/me/preferences/", {"language": "zh-hans"}, format="json").status_code == 200
    assert alice.get(f"/api/v1/inbox/{ref}/").json()["title"] == "请假申请"
    assert alice.get("/api/v1/inbox/", HTTP_ACCEPT_LANGUAGE="en").json()["results"][0]["title"] == "请假申请"
    assert alice.put("/api/v1/me/preferences/", {"language": None}, format="json").status_code == 200
    assert alice.get(f"/api/v1/inbox/{ref}/").json()["title"] == "Leave request"


def test_search_matches_the_text_shown(operator: Any, recipient: Any) -> None:
    ref = "m" + _message(client_for(operator), [recipient], translations=ZH)
    alice = client_for(recipient)
    assert [i["id"] for i in _zh(alice, "/api/v1/inbox/", q="请假")["results"]] == [ref]
    assert _zh(alice, "/api/v1/inbox/", q="Leave")["results"] == []
    assert [i["id"] for i in alice.get("/api/v1/inbox/", {"q": "leave"}).json()["results"]] == [ref]
    assert alice.get("/api/v1/inbox/", {"q": "请假"}).json()["results"] == []


def test_notifications_and_bulletins_in_the_readers_language(operator: Any, recipient: Any) -> None:
    op = client_for(operator)
    assert (
        op.post("/api/v1/manage/message-types/", {"code": "stock", "name": "Stock"}, format="json").status_code == 201
    )
    sub = {"message_type": "stock", "scope": "WH1", "user": recipient.pk}
    assert op.post("/api/v1/manage/subscriptions/", sub, format="json").status_code == 201
    sent = op.post(
        "/api/v1/manage/notifications/",
        {
            "message_type": "stock",
            "scope": "WH1",
            "title": "Low stock",
            "body_html": "<p>A-01</p>",
            "translations": {"zh-hans": {"title": "库存不足"}},
        },
        format="json",
    )
    assert sent.status_code == 202, sent.content
    assert op.get(f"/api/v1/manage/notifications/{sent.json()['id']}/").json()["translations"] == {
        "zh-hans": {"title": "库存不足"}
    }
    assert Notification.objects.get().translations == {"zh-hans": {"title": "库存不足"}}
    bulletin = op.post(
        "/api/v1/manage/bulletins/",
        {
            "title": "Stock-take",
            "body_html": "<p>Friday</p>",
            "display_time": (timezone.now() - timedelta(minutes=1)).isoformat(),
            "translations": {"zh-hans": {"title": "盘点", "body_html": "<p>周五</p>"}},
        },
        format="json",
    )
    assert bulletin.status_code == 201, bulletin.content
    assert (
        op.get(f"/api/v1/manage/bulletins/{bulletin.json()['id']}/").json()["translations"]["zh-hans"]["title"]
        == "盘点"
    )
    alice = client_for(recipient)
    titles = {i["kind"]: i["title"] for i in _zh(alice, "/api/v1/inbox/")["results"]}
    assert titles == {"notification": "库存不足", "bulletin": "盘点"}
    english = {i["kind"]: i["title"] for i in alice.get("/api/v1/inbox/").json()["results"]}
    assert english == {"notification": "Low stock", "bulletin": "Stock-take"}
    assert _zh(alice, f"/api/v1/inbox/b{bulletin.json()['id']}/")["body_html"] == "<p>周五</p>"


def test_announcements_in_the_readers_language(operator: Any, recipient: Any) -> None:
    on_platforms(recipient, "user")
    op = client_for(operator)
    created = op.post(
        "/api/v1/manage/announcements/",
        {
            "title": "Maintenance",
            "summary": "Tonight",
            "body_html": "<p>22:00</p>",
            "platforms": ["user"],
            "translations": {"zh-hans": {"title": "维护", "body_html": "<p>今晚 22:00</p>"}},
        },
        format="json",
    )
    assert created.status_code == 201, created.content
    announcement_id = created.json()["id"]
    assert created.json()["translations"]["zh-hans"]["title"] == "维护"
    assert (
        op.get(f"/api/v1/manage/announcements/{announcement_id}/").json()["translations"]["zh-hans"]["title"] == "维护"
    )
    alice = client_for(recipient)
    listed = _zh(alice, "/api/v1/announcements/")["results"][0]
    assert (listed["title"], listed["summary"]) == ("维护", "Tonight")
    assert alice.get("/api/v1/announcements/").json()["results"][0]["title"] == "Maintenance"
    detail = _zh(alice, f"/api/v1/announcements/{announcement_id}/")
    assert (detail["title"], detail["body_html"]) == ("维护", "<p>今晚 22:00</p>")
    # An edit of the translations reaches the cached list entry.
    row = Announcement.objects.get()
    row.translations = {"zh-hans": {"title": "维护更新"}}
    row.save()
    assert _zh(alice, "/api/v1/announcements/")["results"][0]["title"] == "维护更新"


def test_services_take_translations_too(operator: Any, recipient: Any) -> None:
    message = services.message_send(
        sender=operator,
        category="system",
        title="Hello",
        body_html="<p>x</p>",
        user_ids=[recipient.pk],
        translations={"zh-hans": {"title": "你好"}},
    )
    assert Message.objects.get(pk=message.pk).translations == {"zh-hans": {"title": "你好"}}


def test_pushes_in_each_recipients_language(settings: Any, operator: Any, recipient: Any, other_recipient: Any) -> None:
    from tests.messagecenter.push_service import serve_push
    from tests.messagecenter.test_channels_push import subscribe

    service_iter = serve_push(settings)
    service = next(service_iter)
    try:
        subscribe(recipient, service, "alice-laptop")
        subscribe(other_recipient, service, "bob-laptop")
        client_for(other_recipient).put("/api/v1/me/preferences/", {"language": "zh-hans"}, format="json")
        message_id = _message(
            client_for(operator),
            [recipient, other_recipient],
            channels={"web_push": True},
            translations={"zh-hans": {"title": "请假申请", "summary": "休两天"}},
        )
        (english,) = service.to("alice-laptop")
        (chinese,) = service.to("bob-laptop")
        assert english.payload is not None
        assert chinese.payload is not None
        assert (english.payload["title"], english.payload["summary"]) == ("Leave request", "Two days off")
        assert (chinese.payload["title"], chinese.payload["summary"]) == ("请假申请", "休两天")
        assert chinese.payload["id"] == f"m{message_id}"
    finally:
        for _rest in service_iter:
            pass


def test_emails_in_the_recipients_language(operator: Any, recipient: Any) -> None:
    from messagecenter.services.channels.email import channel_email
    from messagecenter.services.channels.recipients import Recipient, channel_item

    message_id = _message(client_for(operator), [recipient], translations=ZH)
    item = channel_item(f"m{message_id}")
    assert item is not None

    def mail(language: str) -> Any:
        who = Recipient(recipient.pk, "alice@example.org", {}, None, language, away=False)
        return channel_email(recipient=who, items=[item], summary=False)

    chinese = mail("zh-hans")
    assert "请假申请" in chinese.subject
    assert "请假申请" in chinese.body
    english = mail("")
    assert "Leave request" in english.subject
    assert "请假申请" not in english.body


def test_admin_compose_adds_a_translation_with_its_preview(operator: Any, recipient: Any) -> None:
    from django.test import Client

    admin = Client()
    admin.force_login(operator)
    add = "/admin/messagecenter/message/add/"
    content = {
        "category": "system",
        "title": "Sale",
        "body_html": "<p>Now</p>",
        "users": [recipient.pk],
        "translation_language": "zh-hans",
        "translation_title": "促销",
        "translation_body_html": "<p>现在<script>x</script></p>",
    }
    page = admin.post(add, {**content, "_preview": "1"}).content.decode()
    assert 'id="translation-preview"' in page
    assert "<p>现在</p>" in page  # the translation's preview, sanitised
    assert admin.post(add, {**content, "_send": "1"}).status_code == 302
    message = Message.objects.get()
    assert message.translations == {"zh-hans": {"title": "促销", "body_html": "<p>现在</p>"}}
    assert _zh(client_for(recipient), "/api/v1/inbox/")["results"][0]["title"] == "促销"
    # A translation without its language, or an unknown one, is a form error and sends nothing.
    no_language = admin.post(add, {**content, "translation_language": "", "_send": "1"})
    assert no_language.status_code == 200
    assert admin.post(add, {**content, "translation_language": "fr", "_send": "1"}).status_code == 200
    assert Message.objects.count() == 1


def test_admin_bulletin_and_announcement_forms_take_translations(operator: Any, recipient: Any) -> None:
    from django.test import Client

    admin = Client()
    admin.force_login(operator)
    when = timezone.now() - timedelta(minutes=1)
    bulletin = {
        "title": "Stock-take",
        "body_html": "<p>Friday</p>",
        "display_time_0": when.strftime("%Y-%m-%d"),
        "display_time_1": when.strftime("%H:%M:%S"),
        "everyone": "on",
        "translations": '{"zh-hans": {"title": "盘点"}}',
    }
    response = admin.post("/admin/messagecenter/bulletin/add/", bulletin)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert Bulletin.objects.get().translations == {"zh-hans": {"title": "盘点"}}
    bad = admin.post("/admin/messagecenter/bulletin/add/", {**bulletin, "translations": '{"fr": {"title": "x"}}'})
    assert bad.status_code == 200
    assert Bulletin.objects.count() == 1
    announcement = {
        "title": "Maintenance",
        "summary": "",
        "body_html": "<p>22:00</p>",
        "platforms": ["user"],
        "publish_at_0": when.strftime("%Y-%m-%d"),
        "publish_at_1": when.strftime("%H:%M:%S"),
        "translations": '{"zh-hans": {"title": "维护"}}',
    }
    response = admin.post("/admin/notices/announcement/add/", announcement)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert Announcement.objects.get().translations == {"zh-hans": {"title": "维护"}}


def test_patch_replaces_a_bulletins_translations_and_readers_see_it(operator: Any, recipient: Any) -> None:
    op = client_for(operator)
    created = op.post(
        "/api/v1/manage/bulletins/",
        {
            "title": "Stock-take",
            "body_html": "<p>Friday</p>",
            "display_time": (timezone.now() - timedelta(minutes=1)).isoformat(),
            "translations": {"zh-hans": {"title": "盘点"}},
        },
        format="json",
    )
    path = f"/api/v1/manage/bulletins/{created.json()['id']}/"
    alice = client_for(recipient)
    assert _zh(alice, "/api/v1/inbox/")["results"][0]["title"] == "盘点"  # the cached entry, before the edit
    patched = op.patch(path, {"translations": {"zh-hans": {"title": "盘点更正"}}}, format="json")
    assert patched.status_code == 200, patched.content
    assert patched.json()["translations"] == {"zh-hans": {"title": "盘点更正"}}
    assert _zh(alice, "/api/v1/inbox/")["results"][0]["title"] == "盘点更正"
    # A bad one is a 400 that changes nothing; {} drops them all.
    assert_error(op.patch(path, {"translations": {"fr": {"title": "Inventaire"}}}, format="json"), 400)
    assert Bulletin.objects.get().translations == {"zh-hans": {"title": "盘点更正"}}
    assert op.patch(path, {"translations": {}}, format="json").json()["translations"] == {}
    assert _zh(alice, "/api/v1/inbox/")["results"][0]["title"] == "Stock-take"


def test_patch_replaces_an_announcements_translations(operator: Any, recipient: Any) -> None:
    on_platforms(recipient, "user")
    op = client_for(operator)
    created = op.post(
        "/api/v1/manage/announcements/",
        {"title": "Maintenance", "body_html": "<p>22:00</p>", "platforms": ["user"]},
        format="json",
    )
    path = f"/api/v1/manage/announcements/{created.json()['id']}/"
    alice = client_for(recipient)
    assert _zh(alice, "/api/v1/announcements/")["results"][0]["title"] == "Maintenance"
    patched = op.patch(path, {"translations": {"zh-hans": {"title": "维护"}}}, format="json")
    assert patched.status_code == 200, patched.content
    assert patched.json()["translations"] == {"zh-hans": {"title": "维护"}}
    assert _zh(alice, "/api/v1/announcements/")["results"][0]["title"] == "维护"
    assert_error(op.patch(path, {"translations": {"zh-hans": {"title": ""}}}, format="json"), 400)
    assert Announcement.objects.get().translations == {"zh-hans": {"title": "维护"}}


def test_patch_of_a_scheduled_message_replaces_its_translations_and_actions(operator: Any, recipient: Any) -> None:
    op = client_for(operator)
    message_id = _message(op, [recipient], send_at=(timezone.now() + timedelta(hours=1)).isoformat())
    path = f"{MESSAGES}{message_id}/"
    actions = [{"id": "yes", "label": "Yes"}, {"id": "no", "label": "No"}]
    patched = op.patch(path, {"translations": ZH, "actions": actions}, format="json")
    assert patched.status_code == 200, patched.content
    detail = op.get(path).json()
    assert detail["translations"] == {"zh-hans": {"title": "请假申请", "body_html": "<p>两天</p>"}}
    assert detail["actions"] == actions
    # Bad ones are 400s that change nothing; [] drops the actions.
    for bad in ({"actions": [{"id": "yes", "label": "Yes"}] * 2}, {"translations": {"fr": {"title": "x"}}}):
        assert_error(op.patch(path, bad, format="json"), 400)
    assert Message.objects.get().actions == actions
    assert op.patch(path, {"actions": []}, format="json").status_code == 200
    assert Message.objects.get().actions == []
