"""How a filtered listing of the inbox is walked, the same on both paths
(pure functions, no I/O): the Redis path (``inbox.inbox_listing``) and the
PostgreSQL fallback page the archived list and text searches with them.

The walk is page.lua's: items newest first (score descending, equal scores
by member descending) with score <= the cursor's max score, the first
``skip`` of them dropped; the position counts every item walked, kept or not,
so a cursor never repeats or skips an item whatever the filter.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from core.api.translations import localized

# The longest text a search takes (longer is refused, not cut).
QUERY_MAX_LENGTH = 200


@dataclass(frozen=True)
class Walked:
    picked: list[int]  # indexes of the kept items, in order
    next_position: tuple[int, int] | None  # (max score, items at it already walked)


def walk(scores: Iterable[int], *, max_score: int | None, skip: int, limit: int, keep: Callable[[int], bool]) -> Walked:
    """Walk ``scores`` (the listing from the cursor's position on: the first
    ``skip`` items at its max score already dropped) keeping at most ``limit``;
    ``keep`` and ``picked`` count items from 0 there. The scores may come
    lazily: the walk stops one kept item past the page."""
    picked: list[int] = []
    pos_score, pos_skip, more = max_score, skip, False
    for i, score in enumerate(scores):
        if keep(i):
            if len(picked) == limit:
                more = True
                break
            picked.append(i)
        if pos_score is not None and score == pos_score:
            pos_skip += 1
        else:
            pos_score, pos_skip = score, 1
    return Walked(picked, (pos_score, pos_skip) if more and pos_score is not None else None)


def needle(query: str | None) -> str | None:
    """The search text as matched: casefolded (so "STRASSE" finds "Straße"), None for no search."""
    return query.casefold() if query else None


@lru_cache(maxsize=65_536)
def _haystack(title: str, summary: str) -> tuple[str, str]:
    return title.casefold(), summary.casefold()


def matches(detail: dict[str, Any], text: str, language: str | None = None) -> bool:
    """Does the item's title or summary, as a reader of ``language`` sees
    them, contain ``text`` (already ``needle``d)?"""
    shown = localized(detail, detail.get("translations"), language) if "translations" in detail else detail
    title, summary = _haystack(str(shown.get("title") or ""), str(shown.get("summary") or ""))
    return text in title or text in summary
