"""The global write scripts (messagecenter/lua/): one script per operation
and a typed call object per script that names its KEYS and ARGV, so no
caller counts positions.

Their shared helpers live once in preambles, each taking the keys it touches
from the script: an item's detail (``_detail.lua``), removals from every
inbox (``_removals.lua``), bulletin configs (``_bulletins.lua``). A script
runs only the preambles it calls. Every key comes from core.keys and
carries the global hash tag: each call runs on one Redis Cluster slot.
"""

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from core.lua import LuaScript
from messagecenter import keys as mc_keys

DETAIL, REMOVALS, BULLETINS = "../lua/_detail.lua", "../lua/_removals.lua", "../lua/_bulletins.lua"


def _script(name: str, *preambles: str) -> LuaScript:
    return LuaScript(__file__, f"../lua/{name}", preambles=preambles)


ITEM_PUT_SCRIPT = _script("item_put.lua", DETAIL)
ITEM_ADD_SCRIPT = _script("item_add.lua")
DETAILS_MISSING_SCRIPT = _script("details_missing.lua")
BULLETIN_PUT_SCRIPT = _script("bulletin_put.lua", DETAIL, REMOVALS, BULLETINS)
BULLETIN_DELETE_SCRIPT = _script("bulletin_delete.lua", REMOVALS, BULLETINS)
PULL_REGISTER_SCRIPT = _script("pull_register.lua", DETAIL)
ITEM_REMOVE_SCRIPT = _script("item_remove.lua", REMOVALS)
REMOVED_TRIM_SCRIPT = _script("removed_trim.lua")


@dataclass(frozen=True)
class GlobalOp(ABC):
    """One global script's call: ``keys()`` in the order the script binds them."""

    script: ClassVar[LuaScript]

    @staticmethod
    @abstractmethod
    def keys() -> list[str]: ...

    @abstractmethod
    def args(self) -> list[Any]: ...

    def __call__(self) -> Any:
        return self.script(self.keys(), self.args())


@dataclass(frozen=True)
class ItemPut(GlobalOp):
    """Items' details: (ref, detail JSON) pairs, one for a change, a batch for a rebuild."""

    script: ClassVar[LuaScript] = ITEM_PUT_SCRIPT
    details: Sequence[tuple[str, str]]

    @staticmethod
    def keys() -> list[str]:
        return [mc_keys.item_detail(), mc_keys.item_detail_version()]

    def args(self) -> list[Any]:
        return [value for pair in self.details for value in pair]


@dataclass(frozen=True)
class ItemAdd(GlobalOp):
    """Items' details a user's fill brings back where none is stored:
    (ref, inbox member, expiry ms, detail JSON), none removed after ``since``
    (the removal log's version when the fill began) or expired by ``now_ms``."""

    script: ClassVar[LuaScript] = ITEM_ADD_SCRIPT
    since: int
    now_ms: int
    details: Sequence[tuple[str, str, int, str]]

    @staticmethod
    def keys() -> list[str]:
        return [mc_keys.item_detail(), mc_keys.removed()]

    def args(self) -> list[Any]:
        return [self.since, self.now_ms, *(value for quad in self.details for value in quad)]


@dataclass(frozen=True)
class DetailsMissing(GlobalOp):
    """Which of these refs have no detail stored."""

    script: ClassVar[LuaScript] = DETAILS_MISSING_SCRIPT
    refs: Sequence[str]

    @staticmethod
    def keys() -> list[str]:
        return [mc_keys.item_detail()]

    def args(self) -> list[Any]:
        return list(self.refs)


@dataclass(frozen=True)
class BulletinPut(GlobalOp):
    script: ClassVar[LuaScript] = BULLETIN_PUT_SCRIPT
    now_ms: int
    bulletin_id: int
    ref: str
    detail_json: str
    removed_member: str  # the member every inbox drops ("" for a new bulletin)
    configs: Sequence[tuple[str, int, str]]  # (config member, display ms, config JSON)

    @staticmethod
    def keys() -> list[str]:
        return [
            mc_keys.item_detail(),
            mc_keys.item_detail_version(),
            mc_keys.bulletin_config(),
            mc_keys.bulletin_detail(),
            mc_keys.bulletin_members(),
            mc_keys.bulletin_update_time(),
            mc_keys.removed(),
            mc_keys.removed_version(),
            mc_keys.bulletin_changes(),
            mc_keys.bulletin_changes_floor(),
        ]

    def args(self) -> list[Any]:
        out: list[Any] = [self.now_ms, self.bulletin_id, self.ref, self.detail_json, self.removed_member]
        out.append(len(self.configs))
        for config in self.configs:
            out.extend(config)
        return out


@dataclass(frozen=True)
class BulletinDelete(GlobalOp):
    script: ClassVar[LuaScript] = BULLETIN_DELETE_SCRIPT
    now_ms: int
    bulletin_id: int
    ref: str
    member: str

    @staticmethod
    def keys() -> list[str]:
        return [
            mc_keys.item_detail(),
            mc_keys.bulletin_config(),
            mc_keys.bulletin_detail(),
            mc_keys.bulletin_members(),
            mc_keys.bulletin_update_time(),
            mc_keys.removed(),
            mc_keys.removed_version(),
            mc_keys.bulletin_changes(),
            mc_keys.bulletin_changes_floor(),
        ]

    def args(self) -> list[Any]:
        return [self.now_ms, self.bulletin_id, self.ref, self.member]


@dataclass(frozen=True)
class PullRegister(GlobalOp):
    script: ClassVar[LuaScript] = PULL_REGISTER_SCRIPT
    ref: str
    detail_json: str
    pull_member: str
    # The live broadcast published when the item is registered: (channel, event), or none.
    announce: tuple[str, str] = ("", "")

    @staticmethod
    def keys() -> list[str]:
        return [mc_keys.item_detail(), mc_keys.item_detail_version(), mc_keys.pull(), mc_keys.pull_sequence()]

    def args(self) -> list[Any]:
        return [self.ref, self.detail_json, self.pull_member, *self.announce]


@dataclass(frozen=True)
class ItemRemove(GlobalOp):
    script: ClassVar[LuaScript] = ITEM_REMOVE_SCRIPT
    ref: str
    member: str
    pull_member: str  # "" for push items

    @staticmethod
    def keys() -> list[str]:
        return [mc_keys.item_detail(), mc_keys.pull(), mc_keys.removed(), mc_keys.removed_version()]

    def args(self) -> list[Any]:
        return [self.ref, self.member, self.pull_member]


@dataclass(frozen=True)
class RemovedTrim(GlobalOp):
    script: ClassVar[LuaScript] = REMOVED_TRIM_SCRIPT
    keep: int

    @staticmethod
    def keys() -> list[str]:
        return [mc_keys.removed(), mc_keys.removed_floor()]

    def args(self) -> list[Any]:
        return [self.keep]


GLOBAL_OPS: tuple[type[GlobalOp], ...] = (ItemPut, BulletinPut, BulletinDelete, PullRegister, ItemRemove, RemovedTrim)
LuaScript.load_together([op.script for op in GLOBAL_OPS])
