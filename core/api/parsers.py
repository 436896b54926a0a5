"""The API's JSON parser: DRF's, refusing text that cannot be stored.

JSON lets a string carry a lone UTF-16 surrogate (``"\\ud800"``); Python keeps
it, and it then fails to encode on its way to PostgreSQL, Redis or the JSON
renderer (a 500 long after validation). Refusing it here, as malformed input,
covers every field and key of every endpoint at once.
"""

from collections.abc import Mapping
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


def _has_lone_surrogate(value: Any) -> bool:
    # Iterative walk: a deeply nested document must not hit the recursion limit.
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


class StrictJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError as exc:
            # json gives up on deep nesting ("[[[[...") with RecursionError, not ValueError.
            raise ParseError("JSON parse error - the body is nested too deeply.") from exc
        if _has_lone_surrogate(data):
            raise ParseError("JSON parse error - the body holds a lone surrogate (\\ud800-\\udfff), which is not text.")
        return data
