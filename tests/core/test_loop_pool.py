"""core.redis.LoopPool: at most ``size`` connections, handed out in turn; a
caller that finds them all busy waits for the next one released, and one
that gave up waiting (its deadline) is passed over, never handed one."""

import asyncio

from core.redis import LoopPool


class Made:
    def __init__(self, number: int) -> None:
        self.number = number


def _pool(size: int) -> tuple[LoopPool, list[Made]]:
    made: list[Made] = []

    def make() -> Made:
        made.append(Made(len(made)))
        return made[-1]

    return LoopPool(make, size), made  # type: ignore[arg-type]


def test_connections_are_made_up_to_the_bound_and_reused() -> None:
    async def scenario() -> None:
        pool, made = _pool(2)
        first, second = await pool.get_connection(), await pool.get_connection()
        assert len(made) == 2
        assert first is not second
        pool.release(first)
        assert await pool.get_connection() is first  # reused, none made
        assert len(made) == 2

    asyncio.run(scenario())


def test_waiters_get_released_connections_in_turn_and_a_lapsed_one_is_passed_over() -> None:
    async def scenario() -> None:
        pool, made = _pool(1)
        held = await pool.get_connection()
        lapsed = asyncio.ensure_future(asyncio.wait_for(pool.get_connection(), 0.01))
        waiting = asyncio.ensure_future(pool.get_connection())
        later = asyncio.ensure_future(pool.get_connection())
        await asyncio.sleep(0.05)
        assert lapsed.done()
        assert isinstance(lapsed.exception(), TimeoutError)
        pool.release(held)
        assert await waiting is held  # the lapsed waiter was passed over
        assert not later.done()
        pool.release(held)
        assert await later is held
        assert len(made) == 1

    asyncio.run(scenario())


def test_a_connection_handed_to_a_waiter_that_was_cancelled_meanwhile_goes_on() -> None:
    async def scenario() -> None:
        pool, _made = _pool(1)
        held = await pool.get_connection()
        gone = asyncio.ensure_future(pool.get_connection())
        await asyncio.sleep(0)
        pool.release(held)  # handed to ``gone``, which is cancelled before it runs
        gone.cancel()
        await asyncio.sleep(0)
        assert gone.cancelled()
        assert await asyncio.wait_for(pool.get_connection(), 1) is held

    asyncio.run(scenario())
