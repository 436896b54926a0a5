"""Slot proofs for the Lua scripts.

Redis Cluster runs a script on the node of its keys' slot: every key must
arrive in KEYS and all of them must hash to one slot. A script that touches a
key outside KEYS still works while that key happens to sit on the same node,
and breaks after a reshard; fakeredis and a single Redis never notice. So:

- a dynamic proof records every LuaScript call while every message-centre
  operation that runs a script is exercised, with the read model's cluster
  routing switched on (on whatever Redis this run has), checks that every
  ``.lua`` file under messagecenter/lua (its shared preambles ``_*.lua``
  run inside the others) was seen, and that each call's keys map to ONE
  slot (one script per operation: no script dispatches on an argument);
- a static proof reads every ``.lua`` file of the repository, as Redis runs it
  (a script declared with a preamble: the preamble first), and checks that
  each key a ``redis.call`` (or its alias ``call``) touches is a ``KEYS[...]`` expression or a name
  bound only from ``KEYS[...]``: never built from ARGV or by concatenation.
"""

import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from django.test import override_settings
from redis.cluster import key_slot

import core.redis
from core.api.errors import NotFound
from core.lua import SCRIPTS, LuaScript
from durability import healing
from messagecenter import keys as mc_keys
from messagecenter import selectors, services
from messagecenter.fill import inbox_warm
from messagecenter.models import Bulletin, Message
from messagecenter.readmodel import reads
from messagecenter.services.rebuild import inbox_rebuild
from tests.conftest import ROOT, flush_redis
from tests.factories import UserFactory
from tests.messagecenter.conftest import make_group, send

pytestmark = pytest.mark.django_db(transaction=True)

MC_LUA = ROOT / "messagecenter" / "lua"

OPEN_INBOX = re.compile(r"open_inbox\((\d+), (\d+), (true|false)\)")


def _open_inbox(script: str) -> tuple[int, int, bool] | None:
    """(own keys, own arguments, ever-read bitmaps) an inbox script opens its inbox with."""
    match = OPEN_INBOX.search((MC_LUA / script).read_text())
    return (int(match[1]), int(match[2]), match[3] == "true") if match else None


@dataclass(frozen=True)
class Call:
    script: str
    keys: list[str]
    args: list[str]

    def settle_merge(self) -> tuple[int, int] | None:
        """(removals, merge candidates) of an inbox script call that settles and merges, else None."""
        opened = _open_inbox(self.script)
        if opened is None:
            return None
        own_args = opened[1]
        n = int(self.args[own_args + 1])
        a = own_args + 2 + n
        if self.args[a] != "1":
            return None
        removals = int(self.args[a + 3])  # after the mode: the settling step, the removal version
        return removals, int(self.args[a + 4 + removals])


@pytest.fixture
def recorded() -> Iterator[list[Call]]:
    """Every LuaScript call, with the read model routing calls as on a cluster.

    ``is_cluster()`` makes the fan-out group recipients by slot and run the
    per-user scripts one by one (a cluster pipeline refuses EVALSHA); it is
    forced on in every module that imported it (on the cluster pass it is on
    anyway). Pub/sub is off then too, as on a cluster.
    """
    seen: list[Call] = []
    original = LuaScript.__call__

    def recording(self: LuaScript, keys: Sequence[str], args: Sequence[Any] = (), client: Any = None) -> Any:
        seen.append(Call(Path(self.path).name, list(keys), [str(a) for a in args]))
        return original(self, keys, args, client)

    def streaming(
        self: LuaScript, calls: Iterable[tuple[Sequence[str], Sequence[Any]]], client: Any = None
    ) -> list[Any]:
        # The single-Redis fast lane (one connection, no pipeline): recorded too.
        batch = [(list(k), list(a)) for k, a in calls]
        seen.extend(Call(Path(self.path).name, k, [str(x) for x in a]) for k, a in batch)
        # LuaScript has a stream method: the getattr below finds it before patching.
        return original_stream(self, batch, client)  # type: ignore[misc]

    original_stream = getattr(LuaScript, "stream", None)
    real = core.redis.is_cluster
    modules = [
        module
        for name, module in list(sys.modules.items())
        if name.startswith(("core.", "messagecenter.", "notices.")) and getattr(module, "is_cluster", None) is real
    ]
    assert core.redis in modules
    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(LuaScript, "__call__", recording))
        if original_stream is not None:
            stack.enter_context(mock.patch.object(LuaScript, "stream", streaming))
        for module in modules:
            stack.enter_context(mock.patch.object(module, "is_cluster", return_value=True))
        yield seen


@override_settings(MESSAGECENTER_PUSH_THRESHOLD=2, MESSAGECENTER_FANOUT_CHUNK=2)
def test_every_messagecenter_script_call_stays_in_one_slot(recorded: list[Call], operator: Any, clock: Any) -> None:
    alice, bob, carol = (UserFactory(username=n) for n in ("alice", "bob", "carol"))
    team = make_group("team", alice, bob)

    # Global writes (item_put.lua, bulletin_put.lua, ...): details, bulletins, pull items; push
    # fan-out (deliver.lua, one call per slot), with and without the
    # notification index.
    pushed = send(operator, to={"users": [alice, bob]}, title="push", group_key="p", actor="Ann")
    pulled = send(operator, to={"users": [alice, bob, carol]}, title="pull to a bitmap audience")
    # Grouped: the pull's merge groups it first (group_merge.lua).
    everyone = send(operator, to={"everyone": True}, title="pull to everyone", group_key="g", actor="Ann")
    assert (pushed.delivery, pulled.delivery) == ("push", "pull")
    shown = clock.now - timedelta(minutes=1)
    for_team = services.bulletin_create(title="team", body_html="<p>t</p>", display_time=shown, group_ids=[team.pk])
    services.bulletin_create(title="all", body_html="<p>a</p>", display_time=shown)
    services.message_type_create(code="stock", name="Stock", default_ttl_seconds=60)
    services.subscription_create(message_type="stock", scope="WH1", user_id=alice.pk)
    services.notification_send(message_type="stock", scope="WH1", title="low", body_html="<p>low</p>")

    # One user's inbox (page.lua and the other inbox scripts): the first page merges bulletins and pull items.
    page = selectors.inbox_list(user=alice, limit=3)
    assert len(page.results) == 3
    assert selectors.inbox_list(user=alice, cursor=page.next_cursor, limit=10).results
    selectors.inbox_counts(user=alice)
    assert selectors.inbox_item_get(user=alice, item_id=f"m{pushed.pk}").title == "push"
    with pytest.raises(NotFound):
        selectors.inbox_item_get(user=alice, item_id="m999999999")  # no detail: only a sync
    assert services.inbox_mark_read(user=alice, item_id=f"m{pushed.pk}") is True
    assert services.inbox_mark_unread(user=alice, item_id=f"m{pushed.pk}") is True
    assert services.inbox_mark_all_read(user=alice) > 0
    services.inbox_mark_seen(user=alice)
    assert services.inbox_hide(user=alice, item_id=f"m{pulled.pk}") is True
    # Archive, bulk marks, unarchive, snooze (woken by the read after the clock moves).
    services.inbox_archive(user=alice, item_id=f"m{everyone.pk}")
    assert services.inbox_bulk(user=alice, action="unread", item_ids=[f"m{everyone.pk}", "m999999999"]) == 1
    services.inbox_unarchive(user=alice, item_id=f"m{everyone.pk}")
    services.inbox_snooze(user=alice, item_id=f"m{everyone.pk}", until=clock.now + timedelta(seconds=30))

    # Who has read an item (unread recipients, the channels' e-mail scan): no script on a cluster.
    sent = Message.objects.get(pk=pulled.pk)
    reads.read_ever_bits(month=sent.slot_month, offset=sent.slot_offset, user_ids=[alice.pk, bob.pk, carol.pk])

    # Changes every inbox settles on its next read: an edit, a delete, a
    # retraction, a membership change (drops merged bulletins), a trimmed
    # removal list (a full settle), an expired notification (the sweep).
    services.bulletin_update(bulletin=for_team, data={"title": "team, edited"})
    services.bulletin_delete(bulletin=Bulletin.objects.get(title="all"))
    services.message_retract(message=Message.objects.get(pk=pushed.pk))
    selectors.inbox_list(user=alice)
    services.user_group_remove_members(group=team, user_ids=[bob.pk])
    selectors.inbox_list(user=bob)
    services.inbox_removed_trim(keep=0)
    selectors.inbox_list(user=alice)
    clock.advance(minutes=2)
    assert services.notification_sweep()["removed"] == 1

    # A Redis loss: the committed read state goes back first (restore.lua),
    # then everything else; a pushed item's detail with its recipient's fill
    # (details_missing.lua, item_add.lua).
    kept = send(operator, to={"users": [alice]}, title="pushed before the loss")
    flush_redis()
    inbox_rebuild()
    inbox_warm(user_ids=[alice.pk, bob.pk, carol.pk])  # each user's part: dropped, then filled
    assert [i.id for i in selectors.inbox_list(user=alice).results] == [
        f"m{kept.pk}",
        f"m{everyone.pk}",
        f"b{for_team.pk}",
    ]
    # With self-healing on, a write notes itself in the user's state hash
    # around its commit (write_begin.lua, write_end.lua); the user is filled
    # for that generation first.
    with mock.patch.object(healing, "user_generation", return_value="1"):
        assert services.inbox_mark_read(user=alice, item_id=f"m{everyone.pk}") is True

    # Every script file was seen (but bit_get.lua, which only a single Redis runs:
    # on a cluster the read bits are GETBIT and SISMEMBER, as above) ...
    files = {p.name for p in MC_LUA.glob("*.lua") if not p.name.startswith("_")} - {"bit_get.lua"}
    mc_calls = [c for c in recorded if c.script in files]
    assert {c.script for c in mc_calls} == files
    # ... with the planned settle and merge of the inbox scripts both removing and adding.
    preludes = [p for c in mc_calls if (p := c.settle_merge())]
    assert any(removals for removals, _ in preludes)
    assert any(candidates for _, candidates in preludes)

    # ... and each call's keys, all passed in KEYS, map to one slot.
    for call in recorded:
        assert call.keys, call
        slots = {key_slot(k.encode()) for k in call.keys}
        assert len(slots) == 1, (call.script, call.keys)
    # Per-user keys (alice's, bob's) and the global ones do spread over slots.
    assert len({key_slot(c.keys[0].encode()) for c in mc_calls}) >= 3


# --- static proof ------------------------------------------------------------------

# How each command used by a script takes keys: the positions (after the command
# name, 0-based) of its key arguments; "all" for variadic key commands. A
# command not listed fails the test, so a new one gets classified on purpose.
KEY_ARGS: dict[str, str | tuple[int, ...]] = {
    **dict.fromkeys(
        (
            "GET SET SETNX GETSET INCR INCRBY DECR DECRBY STRLEN GETRANGE SETRANGE "
            "GETBIT SETBIT BITCOUNT BITPOS BITFIELD BITFIELD_RO EXPIRE PEXPIRE TTL PTTL PERSIST TYPE "
            "HGET HMGET HSET HMSET HSETNX HDEL HEXISTS HLEN HKEYS HVALS HGETALL HINCRBY "
            "SADD SREM SISMEMBER SMISMEMBER SMEMBERS SCARD SPOP SRANDMEMBER "
            "LPUSH RPUSH LPOP RPOP LRANGE LLEN LTRIM "
            "ZADD ZREM ZINCRBY ZSCORE ZMSCORE ZRANK ZREVRANK ZCARD ZCOUNT ZRANGE ZREVRANGE "
            "ZRANGEBYSCORE ZREVRANGEBYSCORE ZREMRANGEBYSCORE ZREMRANGEBYRANK ZPOPMIN"
        ).split(),
        (0,),
    ),
    "DEL": "all",
    "MGET": "all",
    "EXISTS": "all",
    "UNLINK": "all",
    # BITOP <operation> <destkey> <srckey>...: every argument after the operation.
    "BITOP": "after_first",
    # PUBSUB NUMSUB names channels, not keys.
    "PUBSUB": (),
    # PUBLISH names a channel, not a key: channels are not slot-bound for
    # scripts (Redis Cluster broadcasts PUBLISH), so deliver.lua takes them in ARGV.
    "PUBLISH": (),
}

KEYS_EXPR = re.compile(r"^KEYS\[[^\]]*(\[[^\]]*\][^\]]*)*\]$")


def _strip_comments(source: str) -> str:
    return "\n".join(re.sub(r"--.*$", "", line) for line in source.splitlines())


def _split_args(text: str) -> list[str]:
    """Top-level comma split of a call's argument list."""
    parts, depth, current, quote = [], 0, "", ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0 and not quote:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    parts.append(current.strip())
    return parts


def _calls(source: str) -> list[list[str]]:
    """Argument lists of every redis.call / redis.pcall."""
    found = []
    # "call" is the scripts' local alias of redis.call.
    for match in re.finditer(r"(?<![\w.])(?:redis\.p?call|call)\(", source):
        depth, i, quote = 1, match.end(), ""
        while depth:
            ch = source[i]
            if quote:  # parentheses inside a string literal ("(" .. score) do not count
                quote = "" if ch == quote else quote
            elif ch in "\"'":
                quote = ch
            else:
                depth += {"(": 1, ")": -1}.get(ch, 0)
            i += 1
        found.append(_split_args(source[match.end() : i - 1]))
    return found


ASSIGNMENT = re.compile(r"^(?:local\s+)?([A-Za-z_][\w\[\]\s.+\-*]*(?:,\s*[A-Za-z_][\w\[\]\s.+\-*]*)*)\s*=(?!=)\s*(.+)$")


def _assignments(source: str) -> list[tuple[str, str]]:
    """(target, value) of every assignment statement, multiple assignments
    paired up, also those inside one-line blocks (``if c then k = v end``)."""
    pairs: list[Any] = []
    for line in source.splitlines():
        for segment in re.split(r"\bthen\b|\bdo\b|\belse\b|;", line):
            segment = re.sub(r"(\s*\bend\b)+\s*$", "", segment).strip()
            if segment.startswith(("if ", "elseif ", "for ", "while ", "return ", "function ", "local function ")):
                continue
            m = ASSIGNMENT.match(segment)
            if m:
                targets, values = _split_args(m.group(1)), _split_args(m.group(2))
                pairs.extend((t.strip(), v.strip()) for t, v in zip(targets, values, strict=False))
    return pairs


UNCALLED = "<a parameter of a function never called>"
FUNCTION = re.compile(r"\blocal\s+function\s+([A-Za-z_]\w*)\s*\(([^)]*)\)")


def _parameter_bindings(source: str) -> list[tuple[str, str]]:
    """(parameter, argument) for every call of a script's local function, as
    if each call assigned its arguments (_bits.lua's helpers take the key):
    a parameter used as a key is then proven by every call site's argument.
    A parameter passed on under its own name adds nothing and is skipped; the
    parameters of a function the script never calls stand for no key (UNCALLED)."""
    pairs: list[Any] = []
    for function in FUNCTION.finditer(source):
        name, params = function.group(1), [p.strip() for p in function.group(2).split(",") if p.strip()]
        calls = [m for m in re.finditer(rf"(?<![\w.]){name}\(", source) if m.start() != function.start(1)]
        if not calls:
            pairs.extend((p, UNCALLED) for p in params)
        for match in calls:
            depth, i = 1, match.end()
            while depth:
                depth += {"(": 1, ")": -1}.get(source[i], 0)
                i += 1
            args = _split_args(source[match.end() : i - 1])
            pairs.extend((p, a) for p, a in zip(params, args, strict=False) if p != a)
    return pairs


def _key_expression_ok(expr: str, assignments: list[tuple[str, str]], depth: int = 0) -> bool:
    """KEYS[...] itself; a name every assignment of which is such a key
    expression; or an element of a table created empty and filled only with
    such key expressions (_item.lua's READ/PUSH by month)."""
    if KEYS_EXPR.match(expr) or expr == UNCALLED:
        return True
    # A name may be a field of a table the helpers pass along (ib.all_key, ib.read[month]).
    name = re.match(r"^([A-Za-z_][\w.]*)(\[.*\])?$", expr)
    if not name or depth > 5:
        return False  # a concatenation, a call, ...
    base, indexed = name.group(1), name.group(2) is not None
    if base in ("ARGV", "KEYS"):
        return False  # ARGV[...]; KEYS[...] matched above
    plain = [v for t, v in assignments if t == base]
    elements = [v for t, v in assignments if t.startswith(base + "[")]
    if indexed:
        values, ok_plain = elements, all(v == "{}" for v in plain)
    else:
        # "local X = nil" declares a name bound later: a nil key is an error, never another key.
        values, ok_plain = [v for v in plain if v != "nil"], True
    return bool(values) and ok_plain and all(_key_expression_ok(v, assignments, depth + 1) for v in values)


def _lua_files() -> list[Path]:
    skip = {".venv", "node_modules", ".git"}
    return sorted(p for p in ROOT.rglob("*.lua") if not skip & set(p.relative_to(ROOT).parts))


def test_lua_scripts_take_every_key_from_KEYS() -> None:
    files = _lua_files()
    assert {p.name for p in MC_LUA.glob("*.lua")} <= {p.name for p in files}
    checked = 0
    import messagecenter.readmodel.scripts  # noqa: F401  (declares the inbox scripts)

    for path in files:
        declared = SCRIPTS.get(str(path.resolve()))
        if path.name.startswith("_"):
            continue  # a preamble: checked as part of each script that runs it
        source = _strip_comments(declared.source if declared else path.read_text(encoding="utf-8"))
        assignments = _assignments(source) + _parameter_bindings(source)
        for args in _calls(source):
            command = args[0].strip("'\"").upper()
            assert command in KEY_ARGS, f"{path.name}: classify the key arguments of {command}"
            positions = KEY_ARGS[command]
            if positions == "all":
                key_args = args[1:]
            elif positions == "after_first":
                key_args = args[2:]
            else:
                # KEY_ARGS holds "all", "after_first" or a list of positions: the strings are taken care of first.
                key_args = [args[1 + p] for p in positions]  # type: ignore[operator]
            for expr in key_args:
                assert _key_expression_ok(expr, assignments), f"{path.name}: {command} on a key not from KEYS: {expr}"
                checked += 1
    assert checked > 50


@pytest.mark.parametrize(
    ("snippet", "ok"),
    [
        ('redis.call("GET", KEYS[1])', True),
        ('local k = KEYS[2]\nredis.call("GET", k)', True),
        ('local T = {}\nT[ARGV[1]] = KEYS[3 + i]\nredis.call("SETBIT", T[m], 1, 1)', True),
        ('redis.call("GET", ARGV[1])', False),
        ('redis.call("GET", "prefix:" .. ARGV[1])', False),
        ('redis.call("GET", KEYS[1] .. ":x")', False),
        ('local k = KEYS[1]\nk = "other"\nredis.call("GET", k)', False),
        ('local T = {}\nT[1] = ARGV[2]\nredis.call("GET", T[1])', False),
        ('local T = {}\nT[1] = KEYS[1]\nlocal k = T[1]\nredis.call("GET", k)', True),
        ('local k = nil\nif x then k = KEYS[4] end\nredis.call("GET", k)', True),
        ('local k = nil\nredis.call("GET", k)', False),
        ('local T = {}\nT[1] = KEYS[1]\nlocal k = T[1] .. "x"\nredis.call("GET", k)', False),
        ('redis.call("DEL", KEYS[1], "x")', False),
        ('local function f(key) redis.call("GET", key) end\nf(KEYS[1])', True),
        ('local function f(key) redis.call("GET", key) end\nf(KEYS[1])\nf(ARGV[1])', False),
        ('local function f(k, key) redis.call("GET", key) end\nlocal function g(key) f(1, key) end\ng(KEYS[2])', True),
        ('local ib = {}\nib.k = KEYS[1]\nredis.call("GET", ib.k)', True),
        ('local ib = {read = {}}\nib.read[m] = KEYS[2]\nredis.call("GETBIT", ib.read[m], 1)', True),
        ('local ib = {}\nib.k = ARGV[1]\nredis.call("GET", ib.k)', False),
        ('local ib = {}\nredis.call("GET", ib.k)', False),
    ],
)
def test_the_static_check_tells_keys_from_built_names(snippet: str, ok: bool) -> None:
    source = _strip_comments(snippet)
    assignments = _assignments(source) + _parameter_bindings(source)
    verdicts: list[Any] = []
    for args in _calls(source):
        command = args[0].strip("'\"").upper()
        positions = KEY_ARGS[command]
        # KEY_ARGS holds "all", "after_first" or a list of positions: the strings are taken care of first.
        key_args = args[1:] if positions == "all" else [args[1 + p] for p in positions]  # type: ignore[operator]
        verdicts.extend(_key_expression_ok(expr, assignments) for expr in key_args)
    assert all(verdicts) is ok


def test_each_inbox_call_object_lays_out_what_its_script_opens() -> None:
    """An op object's own keys and arguments are what its script names at its
    top and opens its inbox with (``open_inbox(own keys, own args, ever)``)."""
    from messagecenter.readmodel import scripts

    ops = [
        scripts.PageOp(
            category="", time_max=None, skip=0, limit=20, unread_only=False, since_time=None, cache_field=""
        ),
        scripts.CountsOp(),
        scripts.GetOp(member="m1|system|202611|1"),
        scripts.MarkOp(member="m1|system|202611|1", read=True, hour=0),
        scripts.HideOp(member="m1|system|202611|1"),
        scripts.ReadAllOp(category="", time_max=None, hour=0),
        scripts.SeenOp(),
        scripts.DropPrefixOp(prefix="b"),
        scripts.SweepOp(limit=10),
        scripts.ArchiveOp(member="m1|system|202611|1", score=5, expire_ms=0),
        scripts.UnarchiveOp(member="m1|system|202611|1", score=5, expire_ms=0),
        scripts.SnoozeOp(member="m1|system|202611|1", score=5, expire_ms=0),
        scripts.BulkMarkOp(members=("m1|system|202611|1", "m2|system|202611|2"), read=True),
        scripts.FillItemsOp(cap=10, items="m1|system|202611|1 5 0 0\n"),
    ]
    assert {id(op.script) for op in ops} == {id(s) for s in scripts.INBOX_SCRIPTS}
    for op in ops:
        name = Path(op.script.path).name
        assert _open_inbox(name) == (len(op.own_keys(42)), len(op.own_args()), op.ever), name
        call = scripts.inbox_call(op, user_id=42, now_ms=5, months=["202611"], mode=scripts.Fast(max_items=9, step=7))
        own = list(op.own_keys(42))
        assert call.keys[11 : 11 + len(own)] == own
        assert call.keys[11 + len(own) : 18 + len(own)] == scripts.fast_keys()
        # Last the generation a checked call wants the user filled for ("": unchecked).
        assert call.args == [*op.own_args(), 5, 1, "202611", "2", 7, 9, ""]
        # The archived and snoozed zsets close every call's KEYS (open_inbox takes them from the end).
        assert call.keys[-2:] == [mc_keys.inbox_archived(42), mc_keys.inbox_snoozed(42)]
        # Before them the unread zsets (all, then by category), the evicted set and the arrivals.
        assert call.keys[-9:-2] == [*scripts.unread_keys(42), mc_keys.inbox_evicted(42), mc_keys.inbox_arrivals(42)]


# Past this a script mixes concerns: its helpers go to a preamble of their own.
LUA_MAX_LINES = 150


def test_every_lua_file_stays_short() -> None:
    long = {p.name: n for p in _lua_files() if (n := len(p.read_text(encoding="utf-8").splitlines())) > LUA_MAX_LINES}
    assert not long, long


# A script that branches on an operation name passed in ARGV ("op == ...").
DISPATCH = re.compile(r"""\b(?:op|mode|kind)\s*==\s*['"][a-z_]+['"]""")


def test_one_script_per_operation() -> None:
    """No script picks its operation from an argument: each operation has its
    own script and call object (its KEYS named, no unused keys passed)."""
    dispatching = [p.name for p in _lua_files() if DISPATCH.search(_strip_comments(p.read_text(encoding="utf-8")))]
    assert not dispatching, dispatching
