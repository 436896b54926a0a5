"""Serializer fields every API of the project shares."""

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from rest_framework import serializers


class OffsetDateTimeField(serializers.DateTimeField):
    """ISO 8601 with an explicit offset (``+00:00``) as API.md shows; DRF would write ``Z``."""

    def to_representation(self, value: datetime | None) -> Any:
        if value is None:
            return None
        return value.astimezone(UTC).isoformat()


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
