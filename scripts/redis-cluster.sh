#!/usr/bin/env bash
# Start or stop a real six-node Redis Cluster on localhost (ports 7000-7005:
# three masters, three replicas), for the cluster tests and for trying the
# read model on a cluster (MESSAGECENTER_REDIS_CLUSTER_URL=redis://127.0.0.1:7000).
#   scripts/redis-cluster.sh start|stop|status
set -euo pipefail
DIR="${REDIS_CLUSTER_DIR:-/tmp/messagecenter-redis-cluster}"
PORTS=(7000 7001 7002 7003 7004 7005)

start() {
  mkdir -p "$DIR"
  for port in "${PORTS[@]}"; do
    if redis-cli -p "$port" ping >/dev/null 2>&1; then continue; fi
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
  if ! redis-cli -p 7000 cluster info 2>/dev/null | grep -q "cluster_state:ok"; then
    redis-cli --cluster create $(printf "127.0.0.1:%s " "${PORTS[@]}") --cluster-replicas 1 --cluster-yes >/dev/null
  fi
  for _ in $(seq 1 100); do
    redis-cli -p 7000 cluster info | grep -q "cluster_state:ok" && break; sleep 0.1
  done
  # Wait until every replica has synced with its master.
  for port in "${PORTS[@]}"; do
    for _ in $(seq 1 100); do
      role=$(redis-cli -p "$port" info replication | tr -d '\r' | awk -F: '/^role:/{print $2}')
      [ "$role" = "master" ] && break
      redis-cli -p "$port" info replication | tr -d '\r' | grep -q "master_link_status:up" && break
      sleep 0.1
    done
  done
  echo "Redis Cluster up on ports ${PORTS[*]}"
}

stop() {
  for port in "${PORTS[@]}"; do
    pidfile="$DIR/$port/redis.pid"
    # Only the process this script started (its pid file), and only while
    # that pid is still a redis-server (a stale file may name another process).
    if [ -f "$pidfile" ]; then
      pid="$(cat "$pidfile")"
      if [ "$(ps -p "$pid" -o comm= 2>/dev/null)" = "redis-server" ]; then
        kill "$pid" 2>/dev/null || true
      fi
    fi
  done
  sleep 0.3
  rm -rf "$DIR"
  echo "Redis Cluster stopped"
}

status() { redis-cli -p 7000 cluster info 2>/dev/null | head -n 1 || echo "down"; }

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
