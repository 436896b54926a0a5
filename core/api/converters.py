"""The one URL converter of every numeric id in a path (``<id:announcement_id>``)."""

from core.api.fields import ID_PATTERN, MAX_ROW_ID


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
