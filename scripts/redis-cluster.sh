#!/usr/bin/env bash
# Start or stop a real six-node Redis Cluster on localhost (ports 7000-7005:
# three masters, three replicas), for the cluster tests and for trying the
# read model on a cluster (MESSAGECENTER_REDIS_CLUSTER_URL=redis://127.0.0.1:7000).
#   scripts/redis-cluster.sh start|stop|status
#   scripts/redis-cluster.sh with COMMAND...   run COMMAND with the cluster up (see with_cluster)
set -euo pipefail
DIR="${REDIS_CLUSTER_DIR:-/tmp/messagecenter-redis-cluster}"
# REDIS_CLUSTER_FIRST_PORT moves all six (the script's own test runs a
# second cluster beside the one the suite uses).
FIRST="${REDIS_CLUSTER_FIRST_PORT:-7000}"
PORTS=($(seq "$FIRST" $((FIRST + 5))))
# Test runs share the cluster (make test-cluster, the session fixture of each
# xdist worker, a developer's run beside CI): each holds USERS shared while it
# uses the cluster, and takes TURN to join (start the cluster if none is up)
# and to leave (stop it if no run is left on it and MARK says a run started
# it). tests/fixtures/cluster.py (redis_cluster_url) follows the same protocol.
USERS="$DIR.users.lock"
TURN="$DIR.turn.lock"
MARK="$DIR/started-for-a-run"

start() {
  if up; then echo "Redis Cluster up on ports ${PORTS[*]}"; return; fi
  # Live nodes that do not form a cluster may only be converging (nodes
  # restarted on their nodes.conf find each other within a few seconds).
  if redis-cli -p "${PORTS[0]}" ping >/dev/null 2>&1; then
    for _ in $(seq 1 50); do up && { echo "Redis Cluster up on ports ${PORTS[*]}"; return; }; sleep 0.1; done
  fi
  # Anything else of ours is a leftover: nodes of a run that was killed, or
  # their nodes.conf files, which make a restarted node remember the old
  # cluster so that "cluster create" refuses it ("node is not empty").
  stop >/dev/null
  for port in "${PORTS[@]}"; do
    if redis-cli -p "$port" ping >/dev/null 2>&1; then
      echo "port $port answers but is not a node this script started (no pid file in $DIR): stop it or set REDIS_CLUSTER_DIR" >&2
      exit 1
    fi
  done
  mkdir -p "$DIR"
  for port in "${PORTS[@]}"; do
    mkdir -p "$DIR/$port"
    # --repl-diskless-sync-delay 0: in a brand-new cluster a killed master is
    # otherwise never replaced (replicas not yet synced).
    redis-server --port "$port" --bind 127.0.0.1 --daemonize yes --cluster-enabled yes \
      --cluster-config-file "$DIR/$port/nodes.conf" --cluster-node-timeout 2000 \
      --save "" --appendonly no --dir "$DIR/$port" --repl-diskless-sync-delay 0 \
      --pidfile "$DIR/$port/redis.pid" --logfile "$DIR/$port/redis.log"
  done
  for port in "${PORTS[@]}"; do
    for _ in $(seq 1 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  done
  if ! out=$(redis-cli --cluster create $(printf "127.0.0.1:%s " "${PORTS[@]}") --cluster-replicas 1 --cluster-yes 2>&1); then
    echo "$out" >&2
    exit 1
  fi
  for _ in $(seq 1 100); do up && break; sleep 0.1; done
  # Wait until every replica has synced with its master.
  for port in "${PORTS[@]}"; do
    for _ in $(seq 1 100); do
      replication=$(redis-cli -p "$port" info replication | tr -d '\r')
      [[ "$replication" == *role:master* || "$replication" == *master_link_status:up* ]] && break
      sleep 0.1
    done
  done
  echo "Redis Cluster up on ports ${PORTS[*]}"
}

stop() {
  local pids=()
  for port in "${PORTS[@]}"; do
    pidfile="$DIR/$port/redis.pid"
    # Only the process this script started (its pid file), and only while
    # that pid is still a redis-server (a stale file may name another process).
    if [ -f "$pidfile" ]; then
      pid="$(cat "$pidfile")"
      if [ "$(ps -p "$pid" -o comm= 2>/dev/null)" = "redis-server" ]; then
        kill "$pid" 2>/dev/null || true
        pids+=("$pid")
      fi
    fi
  done
  # Wait until every node has really exited. A node that is still shutting
  # down keeps its port and rewrites its nodes.conf on the way out: a start
  # right after (the next test run joining) would then find the port taken or
  # a node that still remembers the old cluster, and the create fails.
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
  done
  rm -rf "$DIR"
  echo "Redis Cluster stopped"
}

status() { redis-cli -p "${PORTS[0]}" cluster info 2>/dev/null | head -n 1 || echo "down"; }

# The reply is read whole before it is matched: with pipefail, "| grep -q"
# can fail the pipeline when grep exits before redis-cli has written.
up() { [[ "$(redis-cli -p "${PORTS[0]}" cluster info 2>/dev/null)" == *cluster_state:ok* ]]; }

# Start the cluster unless one is up, run the command, and stop the cluster
# again if a run started it and no other run still uses it. A cluster started
# by hand (`start`) stays up. Exits with the command's status.
with_cluster() {
  exec 8>"$TURN" 9>"$USERS"
  flock -x 8
  if ! up; then
    start 8>&- 9>&-
    touch "$MARK"
  fi
  flock -s 9
  flock -u 8
  local status=0
  "$@" 8>&- 9>&- || status=$?
  flock -u 9
  flock -x 8
  if flock -xn 9 && [ -e "$MARK" ]; then stop; fi
  exit "$status"
}

case "${1:-}" in
  start) start; rm -f "$MARK" ;;
  stop) stop ;;
  status) status ;;
  with) shift; with_cluster "$@" ;;
  *) echo "usage: $0 start|stop|status|with COMMAND..." >&2; exit 2 ;;
esac
