"""scripts/redis-cluster.sh starts a working cluster whatever an earlier run
left behind: nodes killed with their nodes.conf still on disk (a run that was
killed), one node of a live cluster gone, a cluster already up. Runs its own
six nodes on spare ports and a private directory, beside the suite's cluster."""

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

pytestmark = pytest.mark.redis_server

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "redis-cluster.sh"


def _answers(port: int) -> bool:
    # A bare connect: redis-py's client retries a refused connection with
    # back-off, seconds per closed port.
    with socket.socket() as probe:
        probe.settimeout(0.2)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _free_base() -> int:
    # Six node ports and their bus ports (+10000), none answering. Each xdist
    # worker looks in a hundred ports of its own: two workers looking in the
    # same ones at once could both pick a base before either starts a node.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    first = 7100 + 100 * (int(worker) % 3 if worker.isdigit() else 0)
    for base in range(first, first + 100, 10):
        if not any(_answers(port) or _answers(port + 10000) for port in range(base, base + 6)):
            return base
    raise AssertionError(f"no six free ports between {first} and {first + 100}")


class Cluster:
    def __init__(self, directory: Path, base: int) -> None:
        self.directory, self.base = directory, base
        self.env = {**os.environ, "REDIS_CLUSTER_DIR": str(directory), "REDIS_CLUSTER_FIRST_PORT": str(base)}

    def run(self, command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(SCRIPT), command], env=self.env, capture_output=True, text=True, timeout=60)  # noqa: S603, S607

    def info(self) -> dict[str, str]:
        return redis.Redis(port=self.base, decode_responses=True).execute_command("CLUSTER INFO")

    def kill(self, port: int) -> None:
        pid = int((self.directory / str(port) / "redis.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        for _ in range(100):
            if not _answers(port):
                return
            time.sleep(0.05)
        raise AssertionError(f"node {port} still answers after SIGKILL")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path / "cluster", _free_base())
    try:
        yield cluster
    finally:
        cluster.run("stop")


def _assert_up(cluster: Cluster, started: subprocess.CompletedProcess[str]) -> None:
    assert started.returncode == 0, started.stderr
    info = cluster.info()
    assert info["cluster_state"] == "ok"
    assert int(info["cluster_known_nodes"]) == 6
    assert int(info["cluster_slots_assigned"]) == 16384


def test_start_recovers_from_nodes_killed_with_their_files_left(cluster: Cluster) -> None:
    _assert_up(cluster, cluster.run("start"))
    for port in range(cluster.base, cluster.base + 6):
        cluster.kill(port)
    assert (cluster.directory / str(cluster.base) / "nodes.conf").exists()

    _assert_up(cluster, cluster.run("start"))


def test_start_recovers_from_one_node_gone_and_leaves_a_working_cluster_alone(cluster: Cluster) -> None:
    _assert_up(cluster, cluster.run("start"))
    _assert_up(cluster, cluster.run("start"))  # already up: nothing to do

    cluster.kill(cluster.base)
    _assert_up(cluster, cluster.run("start"))


def test_start_refuses_a_port_held_by_a_process_it_did_not_start(cluster: Cluster, tmp_path: Path) -> None:
    port = cluster.base + 3
    pidfile = tmp_path / "foreign.pid"
    subprocess.run(  # noqa: S603
        ["redis-server", "--port", str(port), "--daemonize", "yes", "--save", "", "--pidfile", str(pidfile)],  # noqa: S607
        check=True,
        capture_output=True,
    )
    try:
        for _ in range(50):
            if _answers(port) and pidfile.exists():
                break
            time.sleep(0.05)
        started = cluster.run("start")
        assert started.returncode == 1
        assert f"port {port} answers but is not a node this script started" in started.stderr
        assert not _answers(cluster.base), "no node of the refused cluster is left running"
    finally:
        os.kill(int(pidfile.read_text()), signal.SIGTERM)


def test_stop_leaves_nothing_behind(cluster: Cluster) -> None:
    _assert_up(cluster, cluster.run("start"))
    assert cluster.run("stop").returncode == 0
    assert not any(_answers(port) for port in range(cluster.base, cluster.base + 6))
    assert not cluster.directory.exists()
