"""The drill's processes: a private redis-server, gunicorn, a Celery worker and
beat. Each is started in a process group of its own and stopped by its PID
(the group), whatever happens to the drill."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import redis as redis_py

ROOT = Path(__file__).resolve().parent.parent.parent
VENV_BIN = Path(sys.executable).parent


def free_port(start: int) -> int:
    """A free loopback port at or above ``start`` (never the machine's 6379)."""
    for port in range(start, start + 500):
        if port == 6379:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port from {start}")


class Process:
    """A child in its own session: a signal to the group reaches gunicorn's or
    Celery's own children too."""

    def __init__(self, name: str, command: list[str], *, env: dict[str, str], log: Path) -> None:
        self.name = name
        self.command = command
        self.env = env
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        assert self.process is None or self.process.poll() is not None, f"{self.name} already running"
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.command, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal_group(self, sig: signal.Signals) -> None:
        if self.process is not None:
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """SIGKILL to the whole group: a crash, no warm or cold shutdown."""
        self.signal_group(signal.SIGKILL)
        if self.process is not None:
            self.process.wait(15)

    def stop(self) -> None:
        if not self.running():
            return
        self.signal_group(signal.SIGCONT)
        self.signal_group(signal.SIGTERM)
        assert self.process is not None
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.kill()


class RedisServer(Process):
    """redis-server without persistence: a stop loses everything, as a crash does."""

    def __init__(self, *, port: int, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed")
        command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        command += ["--daemonize", "no", "--dir", str(workdir)]
        super().__init__("redis-server", command, env=dict(os.environ), log=workdir / "redis.log")
        self.port = port
        self.frozen = False

    def url(self, db: int) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def client(self, db: int = 0) -> redis_py.Redis:
        """A client of the drill's own, not the project's."""
        return redis_py.Redis(host="127.0.0.1", port=self.port, db=db, socket_connect_timeout=1, socket_timeout=5)

    def start(self) -> None:
        super().start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if self.client().info("server")["process_id"] == self.pid:
                    return
            except (redis_py.RedisError, OSError):
                pass
            time.sleep(0.05)
        raise RuntimeError(f"redis-server on port {self.port} did not start")

    def freeze(self) -> None:
        self.signal_group(signal.SIGSTOP)
        self.frozen = True

    def thaw(self) -> None:
        self.signal_group(signal.SIGCONT)
        self.frozen = False


def gunicorn(*, port: int, env: dict[str, str], log: Path) -> Process:
    command = [str(VENV_BIN / "gunicorn"), "config.wsgi:application", "--workers", "2", "--threads", "4"]
    command += ["--worker-class", "gthread", "--bind", f"127.0.0.1:{port}", "--timeout", "60", "--log-level", "warning"]
    return Process("gunicorn", command, env=env, log=log)


def celery_worker(*, env: dict[str, str], log: Path, name: str) -> Process:
    command = [sys.executable, "-m", "celery", "-A", "config", "worker", "--concurrency", "2", "-n", f"{name}@%h"]
    command += ["--loglevel", "INFO", "--without-gossip", "--without-mingle"]
    return Process("celery worker", command, env=env, log=log)


def celery_beat(*, env: dict[str, str], log: Path, schedule: Path) -> Process:
    command = [sys.executable, "-m", "celery", "-A", "config", "beat", "--loglevel", "WARNING", "-s", str(schedule)]
    return Process("celery beat", command, env=env, log=log)


class PrivatePostgres:
    """A PostgreSQL cluster of the drill's own (initdb in a temporary directory,
    a spare port), run as the postgres system user, so that the PostgreSQL
    fault stops this one and never the machine's."""

    def __init__(self, *, port: int, workdir: Path) -> None:
        found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
        if not found:
            raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
        self.bin = found[-1].parent
        self.port = port
        self.data = workdir / "pgdata"
        self.log = workdir / "postgres.log"
        self.started = False

    def _as_postgres(self, *command: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *command], check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        self.data.mkdir()
        shutil.chown(self.data, "postgres", "postgres")
        self.log.touch()
        shutil.chown(self.log, "postgres", "postgres")
        os.chmod(self.data.parent, 0o755)  # noqa: S103 - the postgres user must reach its data directory
        self._as_postgres(
            str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8"
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._as_postgres(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.log), "-w", "start"
        )
        self.started = True

    def stop(self, *, mode: str = "fast") -> None:
        """``immediate``: no shutdown checkpoint, as a crash."""
        if self.started:
            self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")
            self.started = False


def uvicorn(*, port: int, env: dict[str, str], log: Path) -> Process:
    """The README's ASGI command, with two workers for the machine's two cores."""
    command = [str(VENV_BIN / "uvicorn"), "config.asgi:application", "--workers", "2", "--host", "127.0.0.1"]
    command += ["--port", str(port), "--no-access-log", "--log-level", "warning"]
    return Process("uvicorn", command, env=env, log=log)


class ClusterNode(RedisServer):
    """One node of the drill's private Redis Cluster (no persistence, as the single server)."""

    def __init__(self, *, port: int, workdir: Path) -> None:
        node_dir = workdir / f"cluster-{port}"
        node_dir.mkdir(parents=True, exist_ok=True)
        super().__init__(port=port, workdir=node_dir)
        # --repl-diskless-sync-delay 0: in a brand-new cluster a killed master is
        # otherwise never replaced (its replica not synced yet).
        self.command += ["--cluster-enabled", "yes", "--cluster-config-file", str(node_dir / "nodes.conf")]
        self.command += ["--cluster-node-timeout", "2000", "--repl-diskless-sync-delay", "0"]
        self.name = f"cluster node :{port}"


class PrivateCluster:
    """Six redis-server processes on spare ports (three masters, three replicas),
    each started and stopped by its PID."""

    def __init__(self, *, workdir: Path, start_port: int) -> None:
        self.nodes: list[ClusterNode] = []
        port = start_port
        for _ in range(6):
            port = free_port(port)
            self.nodes.append(ClusterNode(port=port, workdir=workdir))
            port += 1

    def url(self) -> str:
        return f"redis://127.0.0.1:{self.nodes[0].port}/0"

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RuntimeError("redis-cli is not installed")
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-replicas", "1", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.healthy():
                return
            time.sleep(0.2)
        raise RuntimeError("the drill's Redis Cluster did not become healthy")

    def healthy(self) -> bool:
        """Every node says the cluster is ok and every replica has synced with its master."""
        try:
            for node in self.nodes:
                client = node.client()
                if client.cluster("info").get("cluster_state") != "ok":
                    return False
                replication = client.info("replication")
                if replication["role"] == "slave" and replication.get("master_link_status") != "up":
                    return False
        except (redis_py.RedisError, OSError):
            return False
        return True

    def master_of(self, key: str) -> ClusterNode:
        for node in self.nodes:
            if not node.running():
                continue
            client = node.client()
            if client.info("replication")["role"] != "master":
                continue
            slot = int(client.cluster("keyslot", key))
            for start, end, *owners in client.cluster("slots"):
                if int(start) <= slot <= int(end):
                    port = int(owners[0][1])
                    return next(n for n in self.nodes if n.port == port)
        raise RuntimeError(f"no master holds {key}")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


class RabbitBroker:
    """The machine's RabbitMQ as the stack's broker, isolated from everyone
    else's queues: a virtual host of the drill's own (made with rabbitmqctl,
    deleted by name at the end), or, where rabbitmqctl is not at hand, the
    default virtual host with a queue name of the drill's own. RabbitMQ itself
    is never stopped or reconfigured."""

    def __init__(self, base_url: str, *, tag: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.vhost: str | None = None
        self.queue = f"mc-drill-{tag}"
        self.ctl = shutil.which("rabbitmqctl")

    def start(self) -> None:
        if self.ctl is None:
            return
        vhost = self.queue
        self._ctl("add_vhost", vhost)
        self.vhost = vhost
        self._ctl("set_permissions", "-p", vhost, self.user(), ".*", ".*", ".*")

    def user(self) -> str:
        return urlsplit(self.base_url).username or "guest"

    def url(self) -> str:
        return f"{self.base_url}/{self.vhost}" if self.vhost else f"{self.base_url}//"

    def env(self) -> dict[str, str]:
        """What the stack's processes get: the URL, and the queue name when sharing the default vhost."""
        env = {"CELERY_BROKER_URL": self.url()}
        if self.vhost is None:
            env["MESSAGECENTER_DRILL_QUEUE"] = self.queue
        return env

    def held(self) -> str:
        """Messages delivered to a worker and not acknowledged, on the drill's queue."""
        if self.ctl is None or self.vhost is None:
            return "? (no rabbitmqctl)"
        out = self._ctl("list_queues", "-p", self.vhost, "name", "messages_unacknowledged")
        total = 0
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit():
                total += int(parts[1])
        return str(total)

    def stop(self) -> None:
        if self.vhost is not None:
            self._ctl("delete_vhost", self.vhost)
            self.vhost = None

    def _ctl(self, *args: str) -> str:
        assert self.ctl is not None
        done = subprocess.run([self.ctl, "-q", *args], check=True, capture_output=True, text=True, timeout=60)
        return done.stdout
