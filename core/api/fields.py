"""Serializer fields every API of the project shares, and the URL converter of ids in paths."""

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.api.translations import translations_validate

# Our tables use bigint keys; auth_user.id is a PostgreSQL integer and user
# audiences are 32-bit roaring bitmaps, so a larger user id can name no one
# (and would overflow the bitmap).
MAX_ROW_ID = 2**63 - 1
MAX_USER_ID = 2**31 - 1

# The one spelling of an id: a positive decimal without sign, spaces or
# leading zeros, exactly as the API writes ids in its responses.
ID_PATTERN = r"[1-9][0-9]{0,18}"
_ID_RE = re.compile(rf"\A{ID_PATTERN}\Z")

# Times a client may send: anything outside can only be a mistake (a year
# 0001 or 9999 typo, a zero epoch), and the extremes overflow on the way to
# UTC or in millisecond scores of the read model.
EARLIEST_TIME = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_TIME = datetime(2100, 1, 1, tzinfo=UTC)


class StrictCharField(serializers.CharField):
    """Text only: DRF's CharField would quietly turn ``123`` or ``true`` into a string."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return str(super().to_internal_value(data))


class StrictBooleanField(serializers.BooleanField):
    """JSON booleans only: DRF would accept ``"yes"`` or ``1``."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class StrictIntegerField(serializers.IntegerField):
    """JSON integers only: DRF would accept ``"60"``, ``60.0`` or ``true``."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return int(super().to_internal_value(data))


class StrictInputSerializer(serializers.Serializer):
    """An input body that names only known fields: DRF would silently drop the
    others, so a typo (``"pinnned": true``) or a field a client wishes it could
    set (``"is_superuser"``) would look accepted. Unknown keys are a 400 naming them."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(str(key) for key in data if key not in self.fields)
            if unknown:
                raise serializers.ValidationError({key: ["Unknown field."] for key in unknown})
        return super().to_internal_value(data)


def id_value(raw: Any, *, max_value: int = MAX_ROW_ID) -> int | None:
    """The id ``raw`` names (a JSON integer or the string form), or None when malformed."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, str) and _ID_RE.match(raw):
        value = int(raw)
    else:
        return None
    return value if 1 <= value <= max_value else None


# An opaque id of an item some lists return ("m12": a kind letter, then an id).
_REF_RE = re.compile(rf"\A[a-z]{ID_PATTERN}\Z")


class RefField(serializers.Field):
    """Every opaque item id a request carries: the string the API returned
    (``"m12"``), or a bare JSON integer (accepted as ids are, it names an item
    only where such ids are plain numbers). Anything else is refused."""

    default_error_messages = {"invalid": 'A valid id is one the API returned (e.g. "m12") or a positive integer.'}

    def to_internal_value(self, data: Any) -> str:
        if isinstance(data, int) and not isinstance(data, bool):
            if id_value(data) is None:
                self.fail("invalid")
            return str(data)
        if not isinstance(data, str) or not _REF_RE.match(data):
            self.fail("invalid")
        return data

    def to_representation(self, value: Any) -> str:
        return str(value)


class IdField(serializers.Field):
    """Every id a request carries: ``"8"`` (the form responses give) or ``8``.

    Anything else (``"abc"``, ``"8.5"``, ``8.5``, ``true``, ``""``, zero,
    negatives, or past ``max_value``) is refused, naming the field."""

    default_error_messages = {
        "invalid": 'A valid id is a positive integer or its decimal string (e.g. "8").',
        "max_value": "No id is larger than {max_value}.",
    }

    def __init__(self, *, max_value: int = MAX_ROW_ID, **kwargs: Any) -> None:
        self.max_value = max_value
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> int:
        value = id_value(data, max_value=MAX_ROW_ID)
        if value is None:
            self.fail("invalid")
        if value > self.max_value:
            self.fail("max_value", max_value=self.max_value)
        return value

    def to_representation(self, value: Any) -> str:
        return str(value)


def user_id_field(**kwargs: Any) -> IdField:
    return IdField(max_value=MAX_USER_ID, **kwargs)


def time_in_range(value: datetime) -> bool:
    return EARLIEST_TIME <= value < LATEST_TIME


class TimeField(serializers.DateTimeField):
    """Every time a request carries: ISO 8601 (naive means UTC) between 1970 and 2100."""

    default_error_messages = {
        "out_of_range": "Times must fall between 1970-01-01 and 2100-01-01 (UTC).",
    }

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("default_timezone", UTC)
        super().__init__(**kwargs)

    def to_internal_value(self, value: Any) -> datetime:
        if not isinstance(value, str):
            # DRF would take a datetime object or (via parse) other types; JSON brings strings only.
            self.fail("invalid", format="ISO 8601")
        try:
            parsed = super().to_internal_value(value)
        except (OverflowError, ValueError):
            self.fail("out_of_range")
        if not time_in_range(parsed):
            self.fail("out_of_range")
        return parsed

    def to_representation(self, value: datetime | None) -> Any:
        # An explicit offset (``+00:00``); DRF would write ``Z``.
        if value is None:
            return None
        return value.astimezone(UTC).isoformat()


# Responses write times with the same field inputs read them with.
OffsetDateTimeField = TimeField


class DirectRepresentation:
    """A flat output serializer's ``.data`` built without DRF's per-field
    machinery (a serializer copies its fields per instance and walks them per
    item: about half a millisecond for a page of 20). The serializer stays
    the one description of the object, which the OpenAPI document shows:
    its fields, in its order; only its time fields convert their values (to
    ISO 8601 with an offset), the rest are passed as the items hold them."""

    def __init__(self, serializer_class: type[serializers.Serializer]) -> None:
        fields = serializer_class().fields
        self.names = tuple(fields)
        self.convert = {name: field.to_representation for name, field in fields.items() if isinstance(field, TimeField)}

    def of_mapping(self, item: Mapping[str, Any]) -> dict[str, Any]:
        convert = self.convert
        return {name: convert[name](item[name]) if name in convert else item[name] for name in self.names}

    def of_object(self, item: Any) -> dict[str, Any]:
        convert = self.convert
        return {
            name: convert[name](getattr(item, name)) if name in convert else getattr(item, name) for name in self.names
        }


@extend_schema_field(
    {
        "type": "object",
        "description": "Content in other languages: {language code (settings.LANGUAGES, e.g. zh-hans): "
        '{"title", "summary"?, "body_html"?}}. Readers of that language see it; a field left out shows '
        "the original.",
        "additionalProperties": {
            "type": "object",
            "properties": {"title": {"type": "string"}, "summary": {"type": "string"}, "body_html": {"type": "string"}},
            "required": ["title"],
        },
    }
)
class TranslationsField(serializers.Field):
    """Translations in and out, checked by ``core.api.translations`` (400 on ``translations``)."""

    def to_internal_value(self, data: Any) -> dict[str, dict[str, str]]:
        return translations_validate(data)

    def to_representation(self, value: Any) -> Any:
        return dict(value or {})


class IdConverter:
    """Matches the id spelling responses use; anything else matches no route.

    A path that does not name an id can name no resource, so it is the 404 any
    absent resource gets (never a hint that the route exists). Past the bigint
    bound no row can exist: refusing here keeps the value out of queries too.
    """

    regex = ID_PATTERN

    def to_python(self, value: str) -> int:
        number = int(value)
        if number > MAX_ROW_ID:
            raise ValueError(value)
        return number

    def to_url(self, value: int | str) -> str:
        return str(value)
