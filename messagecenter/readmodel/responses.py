"""The users' answers to items' actions in Redis: one sorted set per user
(``mc_keys.inbox_answers``), written after the answer committed, read by
page.lua with the page on its fast path, else here (only when a row of the
page has actions).

The member is the item's ref; the score packs the answer: its time in ms
times ``ACTION_SLOTS`` plus the index of the chosen action among the item's
actions (at most three, fixed once the message is sent; the detail lists
them). A sorted set rather than a hash of action ids: ZMSCORE finds a row's
answer by one lookup in the set's dict once it outgrows its compact form,
where a hash of hundreds of answers stayed a listpack (up to
``hash-max-listpack-entries``, 512 on some hosts) that each row's lookup
walked from the start (7 µs a row at 500 answers: a page of 20 rows with
actions cost 1.2x a plain page). The times stay exact: ms x 4 is far below
2^53.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from core.redis import get_redis
from messagecenter import keys as mc_keys

ACTION_SLOTS = 4


def action_index(actions: Sequence[Mapping[str, Any]], action: str) -> int:
    """Where ``action`` stands among an item's actions (what the score keeps)."""
    return [str(a["id"]) for a in actions].index(action)


def responses_put(*, user_id: int, responses: Mapping[str, tuple[int, int]]) -> None:
    """Record ``{ref: (action index, at ms)}`` for the user and move their ``rev``:
    a first page the read cache holds shows the item without its answer, and
    the moved tag makes it stale (a rendering racing this write carries the old tag)."""
    if not responses:
        return
    # One slot (the user's hash tag), one MULTI: the answer and the tag move together.
    pipe = get_redis().pipeline(transaction=True)
    pipe.zadd(
        mc_keys.inbox_answers(user_id),
        {ref: at_ms * ACTION_SLOTS + index for ref, (index, at_ms) in responses.items()},
    )
    pipe.hincrby(mc_keys.inbox_state(user_id), "rev", 1)
    pipe.execute()


def responses_drop(*, user_id: int, refs: Sequence[str]) -> None:
    """Forget the user's answers to these items (they left every inbox)."""
    if refs:
        get_redis().zrem(mc_keys.inbox_answers(user_id), *refs)


def responses_get(*, user_id: int, actions: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, tuple[str, int]]:
    """The user's answers to these items (ref -> the item's actions):
    ``{ref: (action id, at ms)}``, unanswered ones left out."""
    if not actions:
        return {}
    refs = list(actions)
    scores = get_redis().zmscore(mc_keys.inbox_answers(user_id), refs)
    found: dict[str, tuple[str, int]] = {}
    for ref, score in zip(refs, scores, strict=True):
        answer = response_of(score, actions[ref])
        if answer is not None:
            found[ref] = answer
    return found


def response_of(score: bytes | str | float | None, actions: Sequence[Mapping[str, Any]]) -> tuple[str, int] | None:
    """An answer as the set holds it, read against the item's actions:
    ``(action id, at ms)``; None when unanswered (or the index names no action)."""
    if score is None:
        return None
    at_ms, index = divmod(int(float(score)), ACTION_SLOTS)
    if index >= len(actions):
        return None
    return str(actions[index]["id"]), at_ms
