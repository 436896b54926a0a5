"""The shipped catalogues: Simplified Chinese translates every string, and the
committed .mo files (what Django loads) say what their .po sources say, so an
edited .po that was not compiled fails here rather than in front of a reader."""

import gettext
from pathlib import Path

import polib
import pytest
from django.conf import settings
from django.test import Client
from django.utils import translation

LOCALE = Path(settings.BASE_DIR) / "locale"
CATALOGUES = sorted(LOCALE.glob("*/LC_MESSAGES/*.po"))


def test_both_languages_ship_both_domains() -> None:
    names = {f"{p.parent.parent.name}/{p.stem}" for p in CATALOGUES}
    assert names == {"en/django", "en/djangojs", "zh_Hans/django", "zh_Hans/djangojs"}


@pytest.mark.parametrize("po_path", [p for p in CATALOGUES if "zh_Hans" in str(p)], ids=lambda p: p.stem)
def test_chinese_translates_every_string(po_path: Path) -> None:
    po = polib.pofile(str(po_path))
    untranslated = [e.msgid for e in po if not e.translated()]
    assert not untranslated, f"{po_path}: untranslated {untranslated}"
    assert len(po) > 30


@pytest.mark.parametrize("po_path", CATALOGUES, ids=lambda p: f"{p.parent.parent.name}-{p.stem}")
def test_compiled_catalogue_matches_its_source(po_path: Path) -> None:
    po = polib.pofile(str(po_path))
    with po_path.with_suffix(".mo").open("rb") as handle:
        compiled = gettext.GNUTranslations(handle)
    for entry in po.translated_entries():
        if entry.msgid_plural:
            assert (
                compiled.ngettext(entry.msgid, entry.msgid_plural, 5) == entry.msgstr_plural[max(entry.msgstr_plural)]
            )
        else:
            assert compiled.gettext(entry.msgid) == entry.msgstr, f"{po_path.name}: {entry.msgid!r} not compiled"


def test_django_answers_in_chinese() -> None:
    with translation.override("zh-hans"):
        assert translation.gettext("Inbox") == "收件箱"
        assert (
            translation.ngettext("Marked %(count)d item as read.", "Marked %(count)d items as read.", 3) % {"count": 3}
            == "已将 3 个项目标为已读。"
        )
    with translation.override("en"):
        assert translation.gettext("Inbox") == "Inbox"


@pytest.mark.django_db
def test_api_errors_follow_the_request_language(recipient: object) -> None:
    client = Client()
    client.force_login(recipient)  # type: ignore[arg-type]
    english = client.get("/api/v1/inbox/?cursor=garbled")
    chinese = client.get("/api/v1/inbox/?cursor=garbled", HTTP_ACCEPT_LANGUAGE="zh-Hans")
    assert english.status_code == chinese.status_code == 400
    assert english.json()["error"]["message"] == "The cursor is not valid."
    assert chinese.json()["error"]["message"] == "分页游标无效。"
    assert chinese.json()["error"]["code"] == english.json()["error"]["code"] == "invalid_cursor"


@pytest.mark.django_db
def test_the_javascript_catalogue_serves_chinese() -> None:
    answer = Client().get("/jsi18n/", HTTP_ACCEPT_LANGUAGE="zh-Hans")
    assert answer.status_code == 200
    # The catalogue is JSON with ASCII escapes.
    assert '"just now": "\\u521a\\u521a"' in answer.content.decode()


@pytest.mark.django_db
def test_the_settings_page_speaks_the_readers_language(recipient: object) -> None:
    client = Client()
    client.force_login(recipient)  # type: ignore[arg-type]
    english = client.get("/inbox/settings/").content.decode()
    chinese = client.get("/inbox/settings/", HTTP_ACCEPT_LANGUAGE="zh-Hans").content.decode()
    assert "Inbox settings" in english
    assert "Muted categories" in english
    assert "收件箱设置" in chinese
    assert "已静音的类别" in chinese
    assert "每周" in chinese
    assert "Muted categories" not in chinese
    # A change answers in the same language.
    answer = client.post(
        "/inbox/settings/",
        {"action": "preferences", "email_digest": "daily"},
        HTTP_ACCEPT_LANGUAGE="zh-Hans",
        follow=True,
    )
    assert "偏好已保存。" in answer.content.decode()
