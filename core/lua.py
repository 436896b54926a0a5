"""Loads Lua scripts kept as ``.lua`` files and runs them by SHA.

Every script receives all the keys it touches through ``KEYS`` (Redis Cluster
rejects, or after a reshard breaks, scripts that build key names themselves),
and callers pass keys that share one hash tag.
"""

from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from redis import Redis
from redis.client import Pipeline
from redis.commands.core import Script
from redis.exceptions import NoScriptError, ResponseError
from redis.utils import HIREDIS_AVAILABLE

from core.redis import RedisClient, get_redis

if HIREDIS_AVAILABLE:  # redis-py's own C packer (requirements.txt pins it)
    import hiredis


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
        if HIREDIS_AVAILABLE and isinstance(client, Redis) and not isinstance(client, Pipeline):
            return self._direct(client, keys, args)
        return self._registered(client)(keys=list(keys), args=list(args), client=client)

    def _direct(self, client: Redis, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """One call on a single Redis, packed by hiredis and sent on a pooled
        connection: none of redis-py's per-command machinery (its argument
        walk, retry wrapper and SCRIPT EXISTS) on the hot paths. A NOSCRIPT
        refusal changed nothing: the script is loaded and the call sent again."""
        command = ("EVALSHA", self._registered(client).sha, len(keys), *keys, *args)
        try:
            packed = [hiredis.pack_command(command)]
        except TypeError:  # an argument hiredis cannot pack: redis-py's own route says why
            return self._registered(client)(keys=list(keys), args=list(args), client=client)
        pool = client.connection_pool
        connection = pool.get_connection()
        try:
            connection.send_packed_command(packed)
            try:
                return connection.read_response()
            except NoScriptError:
                pass
        except ResponseError:
            raise  # an error reply: the connection is in step, it goes back to the pool
        except BaseException:
            connection.disconnect()  # a reply may be left unread
            raise
        finally:
            pool.release(connection)
        client.script_load(self.source)
        return self._direct(client, keys, args)

    def queue(self, pipe: Any, keys: Sequence[str], args: Sequence[Any] = ()) -> None:
        """Queue a call on a single Redis's pipeline as a bare EVALSHA.

        redis-py's Script on a pipeline sends SCRIPT EXISTS first (a round
        trip of its own); this does not. Execute the pipeline with
        ``raise_on_error=False`` and pass the call's reply to ``settle``.
        """
        pipe.execute_command("EVALSHA", self._registered(pipe).sha, len(keys), *keys, *args)

    def settle(
        self, reply: Any, keys: Sequence[str], args: Sequence[Any] = (), client: RedisClient | None = None
    ) -> Any:
        """The result of a queued call: one refused with NOSCRIPT (a flushed or
        restarted script cache) changed nothing and runs again, loaded."""
        if isinstance(reply, NoScriptError):
            return self(keys, args, client=client)
        if isinstance(reply, Exception):
            raise reply
        return reply

    def _registered(self, client: RedisClient) -> Script:
        if self._script is None:
            # A Script only remembers the source and its SHA; the client (or
            # pipeline) that runs it is passed on every call.
            self._script = Script(client, self.source)
        return self._script

    def stream(
        self, calls: Iterable[tuple[Sequence[str], Sequence[Any]]], client: RedisClient | None = None
    ) -> list[Any]:
        """Run many calls on one connection of a single Redis (not a cluster),
        each sent as soon as ``calls`` yields it; replies are read at the end.

        Unlike a pipeline, which packs every command before sending any, Redis
        runs one call while Python builds the next (a fan-out's key lists), so
        the two overlap on two cores; and there is no SCRIPT EXISTS round trip
        first. Calls refused with NOSCRIPT (a restarted or flushed script
        cache) changed nothing: they run again, in order, after the script is
        loaded. Another error reply is raised once every reply has been read.
        """
        client = client if client is not None else get_redis()
        sha = self._registered(client).sha
        pool = client.connection_pool
        connection = pool.get_connection()
        sent: list[tuple[Sequence[str], Sequence[Any]]] = []
        replies: list[Any] = []
        try:
            for script_keys, args in calls:
                command = ("EVALSHA", sha, len(script_keys), *script_keys, *args)
                # hiredis packs str and int arguments itself; redis-py's own
                # packer first walks every argument in Python (twice the cost).
                packed = [hiredis.pack_command(command)] if HIREDIS_AVAILABLE else connection.pack_command(*command)
                connection.send_packed_command(packed)
                sent.append((script_keys, args))
            for _ in sent:
                try:
                    replies.append(connection.read_response())
                except ResponseError as exc:
                    replies.append(exc)
        except BaseException:
            # Replies may be left unread: this connection cannot serve anyone else.
            connection.disconnect()
            raise
        finally:
            pool.release(connection)
        for index, reply in enumerate(replies):
            if isinstance(reply, NoScriptError):
                replies[index] = self(sent[index][0], sent[index][1], client=client)
            elif isinstance(reply, ResponseError):
                raise reply
        return replies
