"""Loads Lua scripts kept as ``.lua`` files and runs them by SHA.

Every script receives all the keys it touches through ``KEYS`` (Redis Cluster
rejects, or after a reshard breaks, scripts that build key names themselves),
and callers pass keys that share one hash tag.
"""

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from redis import Redis
from redis.client import Pipeline
from redis.commands.core import Script
from redis.exceptions import NoScriptError, ResponseError
from redis.utils import HIREDIS_AVAILABLE

from core.redis import RedisClient, get_redis, round_trip

if HIREDIS_AVAILABLE:  # redis-py's own C packer (requirements.txt pins it)
    import hiredis

# How long a stream sends without reading the replies waiting (``_send_all``).
STREAM_READ_SECONDS = 1.0


@dataclass(frozen=True)
class Packed:
    """``count`` arguments already in the Redis protocol (RESP bulk strings) in
    ``data``: keys or arguments of a ``LuaScript.stream`` call, packed once."""

    count: int
    data: bytes


def pack_filled(templates: Sequence[str], fills: Iterable[int], fill: str = "\x01") -> Packed:
    """Every template with ``fill`` replaced by each of ``fills``, fill by fill,
    as RESP bulk strings: what building the strings and packing them gives
    (a test holds the bytes equal), for one ``bytes.replace`` per fill.

    A fan-out's key lists: 800 names per call of 100 recipients cost Python
    about ten times more to build and pack one by one, time Redis waited for
    on two busy cores. The templates' lengths depend on the fill's digits only.
    """
    by_digits: dict[int, bytes] = {}
    parts: list[bytes] = []
    count = 0
    for value in fills:
        digits = str(int(value)).encode()
        template = by_digits.get(len(digits))
        if template is None:
            # Each name's length once its fill is the id: only the digit count matters.
            width = "0" * len(digits)
            template = by_digits[len(digits)] = b"".join(
                b"$%d\r\n%s\r\n" % (len(name.replace(fill, width).encode()), name.encode()) for name in templates
            )
        parts.append(template.replace(fill.encode(), digits))
        count += len(templates)
    return Packed(count, b"".join(parts))


def _bulk(arg: Any) -> bytes:
    """One argument as a RESP bulk string, encoded as redis-py encodes it."""
    if isinstance(arg, bytes):
        data = arg
    elif isinstance(arg, str):
        data = arg.encode()
    elif isinstance(arg, bool):
        raise TypeError("bool is not a Redis argument")
    elif isinstance(arg, int | float):
        data = repr(arg).encode()
    else:
        raise TypeError(f"cannot send {type(arg).__name__} to Redis")
    return b"$%d\r\n%s\r\n" % (len(data), data)


def _pack_plain(args: Sequence[Any]) -> bytes:
    """RESP bulk strings of these arguments without the command's header."""
    if not args:
        return b""
    if HIREDIS_AVAILABLE:
        packed = hiredis.pack_command(tuple(args))
        return packed[packed.index(b"\r\n") + 2 :]  # drop "*<count>"
    return b"".join(_bulk(arg) for arg in args)


def pack_evalsha(sha: str, keys: Sequence[str] | Packed, args: Sequence[Any]) -> bytes:
    """One EVALSHA in the Redis protocol; ``keys`` and any item of ``args`` may be ``Packed``."""
    key_count = keys.count if isinstance(keys, Packed) else len(keys)
    segments = [keys.data if isinstance(keys, Packed) else _pack_plain(keys)]
    count = 3 + key_count
    plain: list[Any] = []
    for arg in args:
        if isinstance(arg, Packed):
            segments.append(_pack_plain(plain))
            count += len(plain) + arg.count
            plain = []
            segments.append(arg.data)
        else:
            plain.append(arg)
    segments.append(_pack_plain(plain))
    count += len(plain)
    head = b"*%d\r\n" % count + _pack_plain(["EVALSHA", sha, key_count])
    return head + b"".join(segments)


def _lua_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def lua_constants(constants: Mapping[str, str | Sequence[str]]) -> str:
    """``local NAME = "value"`` (or a table of strings) per constant: data a
    Python module defines once, handed to the scripts that follow the same rule."""
    lines = []
    for name, value in constants.items():
        literal = _lua_string(value) if isinstance(value, str) else "{" + ", ".join(map(_lua_string, value)) + "}"
        lines.append(f"local {name} = {literal}")
    return "\n".join(lines)


@cache
def _source(path: str, preambles: tuple[str, ...], head: str) -> str:
    # One chunk: the constants and the preambles' local helpers are in scope of the script below.
    texts = [Path(p).read_text(encoding="utf-8") for p in (*preambles, path)]
    return "\n".join([head, *texts] if head else texts)


# Every script declared, by path: the static key checks read the source
# Redis runs (preamble included).
SCRIPTS: dict[str, "LuaScript"] = {}


class LuaScript:
    """A script file next to the module that declares it.

    ``LuaScript(__file__, "lua/counts.lua")`` resolves relative to that module.
    With ``preambles`` (paths relative to the same module) those files come
    first, in order: helpers several scripts share live once, and each script
    still runs as one self-contained chunk by EVALSHA. (Redis Functions would
    share them too, and fakeredis runs them, but a library has no
    NOSCRIPT-style recovery: a restarted or flushed Redis, or each node of a
    cluster, would need an explicit FUNCTION LOAD before the first call.)
    ``constants`` (``lua_constants``) come before them all.
    The SHA is computed once; redis-py's Script falls back to EVAL (and loads
    it) on NOSCRIPT, so a flushed or restarted Redis needs no special care.
    """

    def __init__(
        self,
        anchor: str,
        relative: str,
        *,
        preambles: Sequence[str] = (),
        constants: Mapping[str, str | Sequence[str]] | None = None,
    ) -> None:
        base = Path(anchor).resolve().parent
        self.path = str((base / relative).resolve())
        self.preambles = tuple(str((base / p).resolve()) for p in preambles)
        self.head = lua_constants(constants or {})
        self._script: Script | None = None
        # Scripts loaded together with this one (``load_together``).
        self.family: tuple[LuaScript, ...] = (self,)
        SCRIPTS[self.path] = self

    @staticmethod
    def load_together(scripts: Sequence["LuaScript"]) -> None:
        """A Redis missing one of these scripts (restarted, flushed) gets all
        of them at once: a request running several (a page, then a read-all
        queued in a pipeline) then pays one NOSCRIPT retry, not one per script."""
        family = tuple(scripts)
        for script in family:
            script.family = family

    def load(self, client: Redis) -> None:
        """SCRIPT LOAD this script and its family in one round trip."""
        pipe = client.pipeline(transaction=False)
        for script in self.family:
            pipe.script_load(script.source)
        pipe.execute()

    @property
    def source(self) -> str:
        return _source(self.path, self.preambles, self.head)

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
        try:
            return round_trip(client, [self.command(keys, args, client=client)])[0]
        except TypeError:  # an argument hiredis cannot pack (nothing was sent): redis-py's own route says why
            return self._registered(client)(keys=list(keys), args=list(args), client=client)
        except NoScriptError:
            pass
        self.load(client)
        return self._direct(client, keys, args)

    def command(
        self, keys: Sequence[str], args: Sequence[Any] = (), client: RedisClient | None = None
    ) -> tuple[Any, ...]:
        """The call as a bare EVALSHA command, to send among others in one
        ``core.redis.round_trip`` (single Redis). A NOSCRIPT reply there is raised
        as ``NoScriptError``: the call changed nothing, run it again through ``self``."""
        script = self._script
        if script is None:  # the client is needed only to register the script, once
            script = self._registered(client if client is not None else get_redis())
        return ("EVALSHA", script.sha, len(keys), *keys, *args)

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
        self,
        calls: Iterable[tuple[Sequence[str] | Packed, Sequence[Any]]],
        client: RedisClient | None = None,
    ) -> list[Any]:
        """Run many calls on one connection of a single Redis (not a cluster),
        each sent as soon as ``calls`` yields it; replies are read at the end.

        Unlike a pipeline, which packs every command before sending any, Redis
        runs one call while Python builds the next (a fan-out's key lists), so
        the two overlap on two cores; and there is no SCRIPT EXISTS round trip
        first. A call's keys, and any of its arguments, may come ``Packed``
        (``pack_filled``). Calls refused with NOSCRIPT (a restarted or flushed
        script cache) changed nothing: they are sent again, in order, after the
        script is loaded. Another error reply is raised once every reply has
        been read.
        """
        client = client if client is not None else get_redis()
        sha = self._registered(client).sha
        sent: list[bytes] = []

        def packed() -> Iterator[bytes]:
            for script_keys, args in calls:
                sent.append(pack_evalsha(sha, script_keys, args))
                yield sent[-1]

        replies = self._send_all(client, packed())
        again = [index for index, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if again:
            self.load(client)
            for index, reply in zip(again, self._send_all(client, (sent[i] for i in again)), strict=True):
                replies[index] = reply
        for reply in replies:
            if isinstance(reply, ResponseError):
                raise reply
        return replies

    @staticmethod
    def _send_all(client: RedisClient, commands: Iterable[bytes]) -> list[Any]:
        """Send each packed command as it comes, then read every reply (error replies in place).

        The replies waiting are read first whenever a second has passed since
        the last read: a connection with a ``health_check_interval`` sends a
        PING before a command once that long has passed without a read, and
        would take the first reply waiting for the PING's. A slow producer (a
        rebuild loading each batch from PostgreSQL) or a long stream stays in
        step that way, at one pause a second."""
        pool = client.connection_pool
        connection = pool.get_connection()
        replies: list[Any] = []

        def read(count: int) -> None:
            for _ in range(count):
                try:
                    replies.append(connection.read_response())
                except ResponseError as exc:
                    replies.append(exc)

        try:
            waiting = 0
            read_at = time.monotonic()
            for command in commands:
                if waiting and time.monotonic() - read_at >= STREAM_READ_SECONDS:
                    read(waiting)
                    waiting, read_at = 0, time.monotonic()
                connection.send_packed_command([command])
                waiting += 1
            read(waiting)
        except BaseException:
            # Replies may be left unread: this connection cannot serve anyone else.
            connection.disconnect()
            raise
        finally:
            pool.release(connection)
        return replies
