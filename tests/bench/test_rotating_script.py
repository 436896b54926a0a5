"""The wrk script that rotates many users' tokens (bench/http_load.py), run
in Lua (lupa) the way wrk runs it: one Lua state per wrk thread, ``setup``
and ``done`` in the main state."""

from collections import Counter

import pytest
from lupa.lua51 import LuaRuntime  # wrk runs LuaJIT: Lua 5.1's semantics

from bench import http_load
from bench.http_load import Step, rotating_script

# wrk's API as far as the script uses it: wrk.format, wrk.thread:stop(), and
# thread objects with get/set reaching into the thread's own state.
FAKE_WRK = """
wrk = {
  format = function(method, path, headers, body)
    return {method = method, path = path, auth = headers.Authorization, body = body}
  end,
  thread = {stop = function(self) stopped = true end},
}
"""


def _threads(script: str, count: int) -> list[LuaRuntime]:
    main = LuaRuntime(unpack_returned_tuples=True)
    main.execute(FAKE_WRK + script)
    states = []
    for _ in range(count):
        state = LuaRuntime(unpack_returned_tuples=True)
        state.execute(FAKE_WRK + script)
        states.append(state)
    make = main.eval(
        "function(state, set, get) return {set = function(self, k, v) set(k, v) end,"
        " get = function(self, k) return get(k) end} end"
    )
    for state in states:
        g = state.globals()

        def setter(key: str, value: object, g: object = g) -> None:
            g[key] = value  # type: ignore[index]

        def getter(key: str, g: object = g) -> object:
            return g[key]  # type: ignore[index]

        main.globals().setup(make(state, setter, getter))
    states.insert(0, main)
    return states


def test_every_user_and_every_step_in_rotation() -> None:
    tokens = [f"t{i}" for i in range(10)]
    steps = [
        Step("GET", "/api/v1/inbox/"),
        Step("GET", "/api/v1/inbox/counts/"),
        Step("POST", "/api/v1/inbox/{ref}/read/"),
    ]
    _main, *threads = _threads(rotating_script(tokens=tokens, steps=steps, threads=2, refs=["m1", "m2"]), 2)
    sent = []
    for _ in range(15):  # 30 requests: three passes over the ten users
        for state in threads:
            r = state.globals().request()
            sent.append((r.method, r.path, r.auth, r.body))
    by_user = Counter(auth for _, _, auth, _ in sent)
    assert by_user == {f"Token t{i}": 3 for i in range(10)}
    # Each user meets each step once in three passes.
    for i in range(10):
        kinds = {path.split("/")[-2] for _, path, auth, _ in sent if auth == f"Token t{i}"}
        assert kinds == {"inbox", "counts", "read"}
    posts = [(m, p, b) for m, p, _, b in sent if m == "POST"]
    assert len(posts) == 10
    assert {p for _, p, _ in posts} == {"/api/v1/inbox/m1/read/", "/api/v1/inbox/m2/read/"}
    assert all(b == "{}" for _, _, b in posts)


def test_done_counts_throttled_and_other_failures_over_threads() -> None:
    script = rotating_script(tokens=["t0", "t1"], steps=[Step("GET", "/bench/ping")], threads=2)
    main, *threads = _threads(script, 2)
    for state, statuses in zip(threads, ([200, 429, 429], [500, 200, 404]), strict=True):
        g = state.globals()
        for status in statuses:
            g.request()
            g.response(status, state.table(), "")
    written: list[str] = []
    main.globals().io = main.table_from({"write": written.append})
    main.globals().done(None, None, None)
    assert written == ["ROTATING throttled=2 bad=2\n"]


def test_refs_required_for_a_ref_step() -> None:
    with pytest.raises(ValueError, match="refs are required"):
        rotating_script(tokens=["t"], steps=[Step("POST", "/api/v1/inbox/{ref}/read/")], threads=1)


def test_cold_passes_pool_every_latency_and_their_length() -> None:
    def cold(latencies: list[float], seconds: float, bad: int) -> http_load.RotatingLoad:
        return http_load.RotatingLoad(
            path="/x",
            requests=len(latencies),
            rps=len(latencies) / seconds,
            p50=0.0,
            p99=0.0,
            non_2xx=bad,
            errors=1,
            bad=bad,
            latencies=tuple(latencies),
            seconds=seconds,
        )

    pooled = http_load.pooled([cold([0.1, 0.3, 0.5], 1.0, 1), cold([0.2, 0.4, 0.6, 0.7], 3.0, 0)])
    assert pooled.latencies == (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)
    assert pooled.p50 == 0.4  # the median of all seven, not of either pass
    assert pooled.p99 == 0.7
    assert pooled.requests == 7
    assert pooled.rps == 7 / 4.0
    assert (pooled.non_2xx, pooled.bad, pooled.errors) == (1, 1, 2)
