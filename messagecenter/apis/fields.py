"""Serializer fields shared by the message centre's APIs."""

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
