"""Process-local caches: bounded, least recently used first out, all emptied by one call."""

import threading

from core.local_cache import LocalCache, local_caches_clear


def test_a_full_cache_forgets_the_least_recently_used_entry() -> None:
    cache: LocalCache[str, int] = LocalCache("test lru", maxsize=2)
    cache["a"] = 1
    cache["b"] = 2
    assert cache.get("a") == 1  # "a" is now the more recently used
    cache["c"] = 3
    assert cache.copy() == {"a": 1, "c": 3}
    assert "b" not in cache
    assert cache.get("b", 0) == 0
    assert cache.pop("a") == 1
    assert cache.pop("a") is None
    assert len(cache) == 1


def test_one_call_empties_every_cache() -> None:
    first: LocalCache[int, str] = LocalCache("test first", maxsize=10)
    second: LocalCache[int, str] = LocalCache("test second", maxsize=10)
    first.update({1: "x", 2: "y"})
    second[3] = "z"
    local_caches_clear()
    assert len(first) == len(second) == 0


def test_threads_writing_at_once_keep_it_within_its_bound() -> None:
    cache: LocalCache[tuple[int, int], int] = LocalCache("test threads", maxsize=100)

    def write(thread: int) -> None:
        for i in range(2_000):
            cache[(thread, i)] = i
            cache.get((thread, i - 1))

    threads = [threading.Thread(target=write, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(cache) == 100
    assert len(cache.copy()) == 100
