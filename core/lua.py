"""Loads Lua scripts kept as ``.lua`` files and runs them by SHA.

Every script receives all the keys it touches through ``KEYS`` (Redis Cluster
rejects, or after a reshard breaks, scripts that build key names themselves),
and callers pass keys that share one hash tag.
"""

from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from redis.commands.core import Script

from core.redis import RedisClient, get_redis


@cache
def _source(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


class LuaScript:
    """A script file next to the module that declares it.

    ``LuaScript(__file__, "lua/counts.lua")`` resolves relative to that module.
    The SHA is computed once; redis-py's Script falls back to EVAL (and loads
    it) on NOSCRIPT, so a flushed or restarted Redis needs no special care.
    """

    def __init__(self, anchor: str, relative: str) -> None:
        self.path = str(Path(anchor).resolve().parent / relative)
        self._script: Script | None = None

    @property
    def source(self) -> str:
        return _source(self.path)

    def __call__(
        self,
        keys: Sequence[str],
        args: Sequence[Any] = (),
        client: RedisClient | None = None,
    ) -> Any:
        client = client if client is not None else get_redis()
        if self._script is None:
            # A Script only remembers the source and its SHA; the client (or
            # pipeline) that runs it is passed on every call.
            self._script = Script(client, self.source)
        return self._script(keys=list(keys), args=list(args), client=client)
