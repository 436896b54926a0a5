"""The users' answers to items' actions in Redis: one hash per user
(``mc_keys.inbox_responses``), written after the answer committed, read with
the page (only when a row of it has actions)."""

from collections.abc import Mapping, Sequence

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


def responses_get(*, user_id: int, refs: Sequence[str]) -> dict[str, tuple[str, int]]:
    """The user's answers to these items: ``{ref: (action, at ms)}`` (unanswered ones left out)."""
    if not refs:
        return {}
    raws = get_redis().hmget(mc_keys.inbox_responses(user_id), list(refs))
    found: dict[str, tuple[str, int]] = {}
    for ref, raw in zip(refs, raws, strict=True):
        if raw is None:
            continue
        action, _, at = (raw.decode() if isinstance(raw, bytes) else str(raw)).rpartition(SEPARATOR)
        found[ref] = (action, int(at))
    return found
