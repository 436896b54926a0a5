"""Process-local caches: one kind, one registry, one reset.

A few things are worth remembering per process rather than asking Redis or
PostgreSQL each time (the months a user's bitmaps span, which read-cache
fields this process stored, announcement id lists, signed push headers).
Each is a ``LocalCache``: a bounded map that forgets the least recently used
entry when full (cachetools' ``LRUCache``) behind a lock, since a cache is
shared by the threads of a process and ``LRUCache`` is not thread-safe.

Every cache registers itself when created, so ``local_caches_clear()``
empties them all at once: what a test calls to stand for another process (or
a fresh start), and what nothing else needs to know the caches for. None may
hold the truth: each is a hint its reader checks, or a value it can compute
again.
"""

import threading
from collections.abc import Hashable
from typing import Any, Generic, TypeVar, overload

from cachetools import LRUCache

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_registry: list["LocalCache[Any, Any]"] = []


class LocalCache(Generic[K, V]):
    """A bounded, thread-safe map local to the process (see the module docstring)."""

    def __init__(self, name: str, *, maxsize: int) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._entries: LRUCache[K, V] = LRUCache(maxsize=maxsize)
        _registry.append(self)

    def __repr__(self) -> str:
        return f"<LocalCache {self.name}: {len(self)} of {self._entries.maxsize}>"

    @overload
    def get(self, key: K) -> V | None: ...

    @overload
    def get(self, key: K, default: V) -> V: ...

    def get(self, key: K, default: V | None = None) -> V | None:
        with self._lock:
            return self._entries.get(key, default)

    def __getitem__(self, key: K) -> V:
        with self._lock:
            return self._entries[key]

    def __setitem__(self, key: K, value: V) -> None:
        with self._lock:
            self._entries[key] = value

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._entries

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def pop(self, key: K, default: V | None = None) -> V | None:
        with self._lock:
            return self._entries.pop(key, default)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def copy(self) -> dict[K, V]:
        """The entries now, as a plain dict."""
        with self._lock:
            return dict(self._entries.items())

    def update(self, entries: dict[K, V]) -> None:
        with self._lock:
            self._entries.update(entries)


def local_caches_clear() -> None:
    """Empty every process-local cache (as a new process would start)."""
    for cache in _registry:
        cache.clear()
