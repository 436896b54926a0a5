"""uvicorn against gunicorn on the hot endpoints, with rotating users.

``python -m bench.asgi_vs_wsgi [--users 2000] [--seconds 8] [--workers 2]``

Both servers serve the bench settings (``config.settings.bench``: the
database of ``BENCH_DATABASE_URL``, the Redis of ``BENCH_REDIS_URL``) with
the same number of workers (gunicorn: sync workers), one after the other, on
loopback ports. wrk's connections rotate over ``--users`` users, each with
a token of its own (a Lua script picks the next user's token per request),
so authentication and every per-user Redis structure are exercised across
the crowd rather than one warm user. Endpoints: the inbox page, the counts,
a mark read, the announcements list, the announcement counts, and the DRF
ping view (the floor). Prints requests per second per endpoint and server,
the ratio uvicorn/gunicorn and each endpoint's ratio to the ping on the same
server, plus non-2xx answers (a 500 shows up there).

The machine is shared: run both servers back to back and read the ratios,
not the absolute figures.
"""

import argparse
import fcntl
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.http_load import free_port, run_wrk_script, stop_server

ROOT = Path(__file__).resolve().parent.parent
CONNECTIONS = 16

# A wrk script that sends each request with the next user's token.
_WRK_SCRIPT = """
local tokens = {}
for line in io.lines("%(tokens)s") do tokens[#tokens + 1] = line end
local index = 0
wrk.method = "%(method)s"
request = function()
  index = index %% #tokens + 1
  return wrk.format(nil, nil, {["Authorization"] = "Token " .. tokens[index]})
end
"""


_held: list[object] = []


def _take_slot(slots: int = 12) -> int:
    """A test slot (config/settings/test.py): its lock file, held until exit."""
    while True:
        for slot in range(slots):
            handle = open(os.path.join(tempfile.gettempdir(), f"messagecenter-test-slot-{slot}.lock"), "w")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                continue
            _held.append(handle)
            return slot
        time.sleep(1)


def _prepare(users: int) -> tuple[list[str], str, str]:
    """Tokens of ``users`` users, each with a few inbox items and
    announcements; returns (tokens, an inbox item id everyone has, an announcement id)."""
    import django

    django.setup()
    from bench.__main__ import _ensure_database

    _ensure_database()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from accounts.authentication import TokenAuthentication
    from bench.data import ensure_users, issue_tokens
    from core.redis import get_redis
    from messagecenter.services.messages import message_send
    from notices.services import announcement_create

    call_command("migrate", verbosity=0)
    get_redis().flushdb()
    low, high = ensure_users(users)
    operator, _ = get_user_model().objects.get_or_create(username="bench-operator", defaults={"is_staff": True})
    # The crowd's ids need not be consecutive (a run with more users adds
    # them after other rows): take the ids that exist.
    crowd = get_user_model().objects.filter(pk__gte=low, pk__lte=high, username__regex=r"^bench[0-9]+$")
    tokens = list(issue_tokens(crowd.only("pk", "password")).values())
    # Warm caches (the credential cache of every token), as a running site has them.
    for key in tokens:
        TokenAuthentication().authenticate_credentials(key)
    first = None
    for i in range(5):
        message = message_send(
            sender=operator, category="system", title=f"Hello {i}", body_html="<p>Hello</p>", everyone=True
        )
        first = first or message
    announcement = None
    for i in range(5):
        announcement = announcement_create(
            author=operator, title=f"Notice {i}", body_html="<p>Notice</p>", platforms=["user"]
        )
    if first is None or announcement is None:
        raise RuntimeError("no data made")
    return tokens, f"m{first.pk}", str(announcement.pk)


@contextmanager
def _server(kind: str, workers: int) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings.bench"}
    binary = Path(sys.executable).with_name(kind)
    if kind == "gunicorn":
        command = [str(binary), "config.wsgi:application", "--workers", str(workers), "--worker-class", "sync"]
        command += ["--bind", f"127.0.0.1:{port}", "--log-level", "warning"]
    else:
        command = [str(binary), "config.asgi:application", "--workers", str(workers), "--port", str(port)]
        command += ["--host", "127.0.0.1", "--log-level", "warning", "--no-access-log"]
    log = open(Path(tempfile.gettempdir()) / f"asgi_vs_wsgi-{kind}.log", "w")
    process = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True, stdout=log, stderr=log)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=2):  # noqa: S310 - loopback
                    break
            except (OSError, urllib.error.URLError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{kind} did not start") from None
                time.sleep(0.3)
        yield base
    finally:
        stop_server(process)
        log.close()


def _wrk(url: str, *, method: str, tokens_file: str, seconds: int, connections: int) -> tuple[float, int]:
    script = _WRK_SCRIPT % {"tokens": tokens_file, "method": method}
    done = run_wrk_script(script, url, seconds=seconds, connections=connections)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", done.stdout)
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", done.stdout)
    if rps is None:
        raise RuntimeError(f"could not read wrk's output:\n{done.stdout}\n{done.stderr}")
    return float(rps.group(1)), int(non_2xx.group(1)) if non_2xx else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--connections", type=int, default=CONNECTIONS, help="wrk's open connections")
    parser.add_argument("--servers", default="gunicorn,uvicorn")
    parser.add_argument("--only", default="", help="comma-separated endpoint names (default: all)")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.bench")
    sys.path.insert(0, str(ROOT))
    if "BENCH_REDIS_URL" not in os.environ:
        # A Redis db no test run uses meanwhile: a test slot's, held while we run.
        os.environ["BENCH_REDIS_URL"] = f"redis://127.0.0.1:6379/{15 - _take_slot()}"
    tokens, item, announcement = _prepare(args.users)
    endpoints = [
        ("ping", "GET", "/bench/ping"),
        ("inbox", "GET", "/api/v1/inbox/"),
        ("counts", "GET", "/api/v1/inbox/counts/"),
        ("mark", "POST", f"/api/v1/inbox/{item}/read/"),
        ("announcements", "GET", "/api/v1/announcements/"),
        ("ann. counts", "GET", "/api/v1/announcements/counts/"),
        ("ann. mark", "POST", f"/api/v1/announcements/{announcement}/read/"),
    ]
    if args.only:
        endpoints = [e for e in endpoints if e[0] in {"ping", *args.only.split(",")}]
    with tempfile.NamedTemporaryFile("w", suffix=".tokens", delete=False) as handle:
        handle.write("\n".join(tokens) + "\n")
    results: dict[tuple[str, str], tuple[float, int]] = {}
    try:
        for kind in args.servers.split(","):
            with _server(kind, args.workers) as base:
                for name, method, path in endpoints:
                    # A short warm-up per endpoint: every worker's pools and caches are filled.
                    _wrk(base + path, method=method, tokens_file=handle.name, seconds=1, connections=args.connections)
                    results[(kind, name)] = _wrk(
                        base + path,
                        method=method,
                        tokens_file=handle.name,
                        seconds=args.seconds,
                        connections=args.connections,
                    )
    finally:
        os.unlink(handle.name)
    print(
        f"{args.users} rotating users, {args.workers} workers each, wrk {args.connections} connections, {args.seconds} s"
    )
    print(f"{'endpoint':<14} {'gunicorn':>9} {'uvicorn':>9} {'uv/gu':>6} {'gu/ping':>8} {'uv/ping':>8} {'non-2xx':>9}")
    missing = (float("nan"), 0)
    for name, _method, _path in endpoints:
        gu, gu_bad = results.get(("gunicorn", name), missing)
        uv, uv_bad = results.get(("uvicorn", name), missing)
        gu_ping = results.get(("gunicorn", "ping"), missing)[0]
        uv_ping = results.get(("uvicorn", "ping"), missing)[0]
        print(
            f"{name:<14} {gu:>9.0f} {uv:>9.0f} {uv / gu:>6.2f} {gu / gu_ping:>8.2f} {uv / uv_ping:>8.2f}"
            f" {gu_bad:>4}/{uv_bad:<4}"
        )


if __name__ == "__main__":
    main()
