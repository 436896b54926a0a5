"""Closing a process's live hub ends even when a task swallows its cancellation.

A cancellation that lands inside a library call can be swallowed there (a
pub/sub UNSUBSCRIBE was seen doing it); the task then waits for work again.
Closing the hub must still end, promptly, and stop every task it can.
"""

import asyncio
import logging
import time
from typing import Any

from live import transport as live


def _unused_factory() -> tuple[Any, Any]:
    raise AssertionError("the hub was not started: no connection is made")


async def _close(hub: live.LiveHub, tasks: list["asyncio.Task[None]"]) -> float:
    hub._tasks = tasks
    await asyncio.sleep(0)  # every task reaches its first wait
    started = time.monotonic()
    await asyncio.wait_for(hub.close(), timeout=10)
    return time.monotonic() - started


def test_close_cancels_again_a_task_that_swallowed_the_first_cancel() -> None:
    swallowed: list[bool] = []

    async def swallows_one_cancel() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            swallowed.append(True)  # and carries on, as if nothing had happened
        await asyncio.sleep(3600)

    async def scenario() -> tuple[float, list[bool]]:
        tasks = [asyncio.create_task(swallows_one_cancel()), asyncio.create_task(asyncio.sleep(3600))]
        took = await _close(live.LiveHub(_unused_factory), tasks)
        return took, [task.cancelled() for task in tasks]

    took, cancelled = asyncio.run(scenario())
    assert swallowed == [True]
    assert cancelled == [True, True]
    # The second round's cancel ended it: one round's wait, not the give-up time.
    assert took < 2 * live.HUB_CLOSE_WAIT_SECONDS


def test_close_gives_up_on_a_task_that_never_ends(caplog: Any) -> None:
    stop = asyncio.Event()

    async def stubborn() -> None:
        while not stop.is_set():
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue

    async def scenario() -> tuple[float, bool]:
        task = asyncio.create_task(stubborn())
        took = await _close(live.LiveHub(_unused_factory), [task])
        alive = not task.done()
        stop.set()  # now it can end, for asyncio.run's own clean-up
        task.cancel()
        return took, alive

    with caplog.at_level(logging.WARNING, logger="live.transport"):
        took, alive = asyncio.run(scenario())
    assert alive
    assert took < live.HUB_CLOSE_ROUNDS * live.HUB_CLOSE_WAIT_SECONDS + 1
    assert "ignored cancellation" in caplog.text
