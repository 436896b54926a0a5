"""Content in the reader's language.

An item (message, notification, bulletin, announcement) may carry
``translations``: ``{language code: {"title", "summary"?, "body_html"?}}``
for codes of ``settings.LANGUAGES``. The read model keeps them inside the
item's one JSON detail, so a page costs the same whatever the number of
languages; the language is picked when the item is rendered, field by field,
falling back to the original.

The reader's language: their ``language`` preference (the app keeping
preferences names how to find it on its AppConfig, ``preferred_language``;
``core.contributions``), else the request's (``LocaleMiddleware``:
the language cookie, else ``Accept-Language``), else ``LANGUAGE_CODE``.
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from django.utils import translation

from core.api.errors import ValidationFailed
from core.contributions import contributed
from core.html import sanitize_html

FIELDS = {"title": 200, "summary": 300, "body_html": 100_000}
TRANSLATED = ("title", "summary", "body_html")


def language_codes() -> list[str]:
    return [str(code) for code, _name in settings.LANGUAGES]


def _invalid(message: str) -> ValidationFailed:
    return ValidationFailed(message, code="invalid_translations", fields={"translations": [message]})


def translations_validate(raw: Any) -> dict[str, dict[str, str]]:
    """The translations as stored: known codes only, a title each, known
    fields of text within their lengths, HTML sanitised; else a 400 on ``translations``."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise _invalid('Translations are {"<language code>": {"title", "summary"?, "body_html"?}}.')
    codes = language_codes()
    return {str(code): _translation_clean(code, fields, codes) for code, fields in raw.items()}


def _translation_clean(code: Any, fields: Any, codes: Sequence[str]) -> dict[str, str]:
    """One language's entry of ``translations_validate``."""
    if code not in codes:
        raise _invalid(f"Unknown language {code!r}: choose from {', '.join(codes)}.")
    if not isinstance(fields, Mapping) or "title" not in fields:
        raise _invalid(f'The {code} translation is {{"title", "summary"?, "body_html"?}}.')
    unknown = sorted(str(name) for name in fields if name not in FIELDS)
    if unknown:
        raise _invalid(f"Unknown field(s) in the {code} translation: {', '.join(unknown)}.")
    entry: dict[str, str] = {}
    for name, value in fields.items():
        if not isinstance(value, str) or len(value) > FIELDS[name] or (name == "title" and not value.strip()):
            raise _invalid(f"The {code} translation's {name} must be text of at most {FIELDS[name]} characters.")
        entry[name] = sanitize_html(value) if name == "body_html" else value
    return entry


def localized(
    original: Mapping[str, Any], translations: Mapping[str, Any] | None, language: str | None
) -> dict[str, Any]:
    """``title``, ``summary`` and ``body_html`` in ``language``: each field from
    its translation when there is one, else the original's."""
    chosen = (translations or {}).get(language or "") or {}
    return {name: chosen.get(name) or original.get(name, "") for name in TRANSLATED}


def reader_language(request: HttpRequest | None, user_id: int | None = None) -> str:
    """The reader's language code: their preference, else the request's, else the default."""
    # The app installed last that names a source (user id -> code or None) decides.
    sources: list[Callable[[int], str | None]] = contributed("preferred_language")
    if user_id is not None and sources:
        chosen = sources[-1](user_id)
        if chosen and chosen in language_codes():
            return chosen
    if request is not None:
        code = getattr(request, "LANGUAGE_CODE", None) or translation.get_language_from_request(request)
        if code in language_codes():
            return str(code)
    return str(settings.LANGUAGE_CODE)
