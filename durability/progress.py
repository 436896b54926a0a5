"""Progress of long management commands (rebuilds, checks), without a dependency.

Services take a ``Progress`` keyword argument and report stages through it;
commands build one over their stdout. On a terminal each stage is a bar
redrawn in place (at most every ``REDRAW_SECONDS``); otherwise (logs, CI,
pipes) each stage prints one plain line when it ends, so a log holds no
carriage returns. ``Progress(None)`` reports nothing (tasks, tests, ``--quiet``).
"""

import time
from types import TracebackType
from typing import Any, Self

from django.core.management.base import OutputWrapper

BAR_WIDTH = 30
REDRAW_SECONDS = 0.1


class Stage:
    """One stage of a job: ``advance(n)`` as work gets done, then ``done()`` (or use ``with``)."""

    def __init__(self, progress: "Progress", name: str, total: int) -> None:
        self.progress = progress
        self.name = name
        self.total = max(0, int(total))
        self.count = 0
        self.started = time.monotonic()
        self._drawn_at = 0.0
        self._finished = False
        if progress.tty:
            self._draw()

    def advance(self, amount: int = 1) -> None:
        self.count += int(amount)
        if self.progress.tty and time.monotonic() - self._drawn_at >= REDRAW_SECONDS:
            self._draw()

    def done(self) -> None:
        if self._finished:
            return
        self._finished = True
        elapsed = time.monotonic() - self.started
        if self.progress.tty:
            self._draw()
            self.progress.write(f" {elapsed:.1f}s\n")
        elif self.progress.stream is not None:
            self.progress.write(f"  {self.name}: {self.count}/{self.total} done in {elapsed:.1f}s\n")

    def _draw(self) -> None:
        self._drawn_at = time.monotonic()
        # The total is an estimate taken before the work (a live site adds
        # rows meanwhile): the bar never runs past full.
        shown = min(self.count, self.total) if self.total else self.count
        ratio = shown / self.total if self.total else 1.0
        filled = int(BAR_WIDTH * ratio)
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        self.progress.write(f"\r  {self.name:<24} [{bar}] {ratio:4.0%} {self.count}/{self.total}")

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.done()
        elif self.progress.tty:
            self.progress.write("\n")  # leave the half-drawn bar; the error prints below it


class Progress:
    """Where a job reports its stages; ``tty`` None asks the stream."""

    def __init__(self, stream: Any | None, *, tty: bool | None = None) -> None:
        self.stream = stream
        if stream is None:
            self.tty = False
        elif tty is None:
            isatty = getattr(stream, "isatty", None)
            self.tty = bool(isatty()) if callable(isatty) else False
        else:
            self.tty = tty

    def stage(self, name: str, total: int) -> Stage:
        return Stage(self, name, total)

    def write(self, text: str) -> None:
        if self.stream is None:
            return
        if isinstance(self.stream, OutputWrapper):
            # A command's stdout ends every write with a newline unless told
            # otherwise: the bar redraws its own line.
            self.stream.write(text, ending="")
        else:
            self.stream.write(text)
        flush = getattr(self.stream, "flush", None)
        if callable(flush):
            flush()


SILENT = Progress(None)
