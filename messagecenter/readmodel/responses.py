"""The users' answers to items' actions in Redis: one hash per user
(``mc_keys.inbox_responses``), written after the answer committed, read by
page.lua with the page on its fast path, else here (only when a row of the
page has actions)."""

from collections.abc import Mapping, Sequence
from functools import lru_cache

from core.redis import get_redis
from messagecenter import keys as mc_keys

SEPARATOR = "|"


def responses_put(*, user_id: int, responses: Mapping[str, tuple[str, int]]) -> None:
    """Record ``{ref: (action, at ms)}`` for the user and move their ``rev``: a
    first page the read cache holds shows the item without its answer, and the
    moved tag makes it stale (a rendering racing this write carries the old tag)."""
    if not responses:
        return
    # One slot (the user's hash tag), one MULTI: the answer and the tag move together.
    pipe = get_redis().pipeline(transaction=True)
    pipe.hset(
        mc_keys.inbox_responses(user_id),
        mapping={ref: f"{action}{SEPARATOR}{at_ms}" for ref, (action, at_ms) in responses.items()},
    )
    pipe.hincrby(mc_keys.inbox_state(user_id), "rev", 1)
    pipe.execute()


def responses_drop(*, user_id: int, refs: Sequence[str]) -> None:
    """Forget the user's answers to these items (they left every inbox)."""
    if refs:
        get_redis().hdel(mc_keys.inbox_responses(user_id), *refs)


def responses_get(*, user_id: int, refs: Sequence[str]) -> dict[str, tuple[str, int]]:
    """The user's answers to these items: ``{ref: (action, at ms)}`` (unanswered ones left out)."""
    if not refs:
        return {}
    raws = get_redis().hmget(mc_keys.inbox_responses(user_id), list(refs))
    found: dict[str, tuple[str, int]] = {}
    for ref, raw in zip(refs, raws, strict=True):
        answer = response_of(raw)
        if answer is not None:
            found[ref] = answer
    return found


def response_of(raw: bytes | str | None) -> tuple[str, int] | None:
    """An answer as the hash holds it: ``(action, at ms)``, None when unanswered."""
    return None if raw is None else _parsed(raw)


@lru_cache(maxsize=16_384)
def _parsed(raw: bytes | str) -> tuple[str, int]:
    # Parsed once per distinct value: a polled page reads the same answers
    # again and again.
    action, _, at = (raw.decode() if isinstance(raw, bytes) else raw).rpartition(SEPARATOR)
    return action, int(at)
