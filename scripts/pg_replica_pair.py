"""A private PostgreSQL primary and a streaming replica of it, on spare ports.

The replica tests (tests/core/test_replicas.py) run against a real pair:
``initdb`` a primary in a temp dir, ``pg_basebackup -R`` a replica from it,
start both with ``pg_ctl`` and stop them by the PIDs in their
``postmaster.pid``. The machine's binaries are used (``PG_BIN``, else the
newest ``/usr/lib/postgresql/<version>/bin``); run as root, each command runs
as the ``postgres`` system user (PostgreSQL refuses to run as root).

By hand: ``python scripts/pg_replica_pair.py`` starts a pair, prints both URLs
and stops it on Ctrl-C.
"""

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

DATABASE = "mc"
SERVER_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "wal_level": "replica",
    "max_wal_senders": "4",
    "hot_standby": "on",
    # Throwaway clusters: durability buys nothing and costs the tests time.
    "fsync": "off",
    "full_page_writes": "off",
    "shared_buffers": "32MB",
    "max_connections": "60",
    # The replica reports its replay position every second.
    "hot_standby_feedback": "on",
    "wal_receiver_status_interval": "1s",
}


class PairError(RuntimeError):
    """The pair could not be started (binaries missing, a command failed)."""


def postgres_bin() -> Path:
    """The directory of initdb, pg_ctl and pg_basebackup; PairError when absent."""
    configured = os.environ.get("PG_BIN")
    candidates = [Path(configured)] if configured else []
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name), reverse=True)
    for directory in candidates:
        if all((directory / tool).is_file() for tool in ("initdb", "pg_ctl", "pg_basebackup")):
            return directory
    raise PairError(
        "PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup) not found: install the "
        "postgresql package or set PG_BIN to their directory"
    )


def free_port(start: int, *, taken: Callable[[int], bool] = lambda port: False) -> int:
    for port in range(start, start + 500):
        if taken(port):
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise PairError(f"no free port from {start}")


class Server:
    """One postgres server of the pair, in its own data directory."""

    def __init__(self, pair: "ReplicaPair", name: str, port: int) -> None:
        self.pair = pair
        self.name = name
        self.port = port
        self.data = pair.root / name
        self.log = pair.root / f"{name}.log"

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{DATABASE}"

    def connect(self, *, dbname: str = DATABASE, autocommit: bool = True) -> psycopg.Connection[Any]:
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname=dbname, autocommit=autocommit, connect_timeout=5
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.pair.root}"
        self.pair.run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60", "start")

    def pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def stop(self, *, fast: bool = True) -> None:
        """Stop the server by its PID: SIGINT (fast shutdown) or SIGQUIT (a
        crash, no checkpoint), then wait until the process is gone."""
        pid = self.pid()
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGINT if fast else signal.SIGQUIT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            (self.data / "postmaster.pid").unlink()


class ReplicaPair:
    """``start()`` a primary (with database ``mc``) and a replica streaming
    from it; ``close()`` stops both by PID and removes their files."""

    def __init__(self, *, primary_port: int, replica_port: int) -> None:
        self.bin = postgres_bin()
        self.root = Path(tempfile.mkdtemp(prefix="mc-pg-pair-"))
        self.user: str | None = "postgres" if os.geteuid() == 0 else None
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self.primary = Server(self, "primary", primary_port)
        self.replica = Server(self, "replica", replica_port)

    def run(self, tool: str, *args: str) -> None:
        command = [str(self.bin / tool), *args]
        try:
            subprocess.run(  # noqa: S603  (our own binaries and arguments)
                command, cwd=self.root, user=self.user, check=True, capture_output=True, timeout=120
            )
        except subprocess.CalledProcessError as error:
            output = (error.stdout or b"").decode(errors="replace") + (error.stderr or b"").decode(errors="replace")
            raise PairError(f"{tool} failed ({error.returncode}): {output.strip()}") from None

    def start(self) -> "ReplicaPair":
        try:
            self.run("initdb", "-D", str(self.primary.data), "-U", "postgres", "--auth=trust", "--no-sync")
            with (self.primary.data / "postgresql.auto.conf").open("a") as conf:
                conf.writelines(f"{name} = {value}\n" for name, value in SERVER_SETTINGS.items())
            self.primary.start()
            with self.primary.connect(dbname="postgres") as connection:
                connection.execute(f"CREATE DATABASE {DATABASE}")
            # -c fast: a spread checkpoint first would take minutes.
            # -R writes standby.signal and primary_conninfo: the copy starts as a streaming replica.
            self.run(
                "pg_basebackup",
                *("-h", "127.0.0.1", "-p", str(self.primary.port), "-U", "postgres"),
                *("-D", str(self.replica.data), "-R", "-X", "stream", "-c", "fast", "--no-sync"),
            )
            self.replica.start()
            self.wait_streaming()
        except BaseException:
            self.close()
            raise
        return self

    def wait_streaming(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(psycopg.Error), self.primary.connect() as connection:
                streaming = "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
                row = connection.execute(streaming).fetchone()
                if row and row[0]:
                    return
            if time.monotonic() > deadline:
                raise PairError(f"the replica does not stream: {self.replica.log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.1)

    def wait_replayed(self, timeout: float = 30.0) -> None:
        """Until the replica has replayed everything the primary wrote so far."""
        with self.primary.connect() as primary:
            row = primary.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
        if row is None:
            raise PairError("the primary reports no WAL position")
        target = row[0]
        deadline = time.monotonic() + timeout
        with self.replica.connect() as replica:
            while True:
                done = replica.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [target]).fetchone()
                if done and done[0]:
                    return
                if time.monotonic() > deadline:
                    raise PairError("the replica did not catch up")
                time.sleep(0.05)

    def pause_replay(self) -> None:
        with self.replica.connect() as replica:
            replica.execute("SELECT pg_wal_replay_pause()")

    def resume_replay(self) -> None:
        with self.replica.connect() as replica:
            replica.execute("SELECT pg_wal_replay_resume()")

    def close(self) -> None:
        # Throwaway data: an immediate stop, no shutdown checkpoint to wait for.
        self.replica.stop(fast=False)
        self.primary.stop(fast=False)
        shutil.rmtree(self.root, ignore_errors=True)


def main() -> None:
    primary_port = free_port(5491)
    pair = ReplicaPair(primary_port=primary_port, replica_port=free_port(primary_port + 1)).start()
    print(f"primary: {pair.primary.url}\nreplica: {pair.replica.url}\nCtrl-C stops both.", flush=True)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        pair.close()


if __name__ == "__main__":
    main()
