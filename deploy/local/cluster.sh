#!/usr/bin/env bash
# A replicated Apache Kafka on this machine: three KRaft nodes, each broker
# and controller, on 127.0.0.1 (clients 19092-19094, controllers
# 19192-19194), through deploy/local/kafka.sh. The internal topics are
# replicated three times with two in sync; create the ledger's the same way:
#
#   deploy/local/cluster.sh up        start the nodes (each log kept in
#                                     ~/.stockledger/cluster/node-N/data)
#   deploy/local/cluster.sh down      stop them (SIGTERM; logs kept)
#   deploy/local/cluster.sh env       KAFKA_BROKERS for the three nodes
#   deploy/local/cluster.sh kill N    kill -9 node N (1-3); `up` restarts it
#
#   eval "$(deploy/local/cluster.sh env)"
#   stockledger topics create --replication 3   # min.insync.replicas 2
#   stockledger apply
#
# Redis and PostgreSQL come from deploy/local/stack.sh, as ever.
set -euo pipefail

KAFKA=$(cd "$(dirname "$0")" && pwd)/kafka.sh
STATE=${STOCKLEDGER_HOME:-$HOME/.stockledger}/cluster
NODES=(1 2 3)
port() { echo $((19091 + $1)); }
controller() { echo $((19191 + $1)); }

log() { printf 'cluster: %s\n' "$*" >&2; }

voters() {
  local n out=""
  for n in "${NODES[@]}"; do out="$out${out:+,}$n@127.0.0.1:$(controller "$n")"; done
  echo "$out"
}

brokers() {
  local n out=""
  for n in "${NODES[@]}"; do out="$out${out:+,}127.0.0.1:$(port "$n")"; done
  echo "$out"
}

node_pid() { # node
  local f=$STATE/node-$1/node.pid pid
  [ -f "$f" ] && pid=$(cat "$f") && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

start_node() { # node
  local n=$1 dir=$STATE/node-$1
  mkdir -p "$dir"
  # Only what this start logs counts when waiting for it.
  if [ -f "$dir/server.log" ]; then wc -l <"$dir/server.log" >"$dir/log.mark"; else echo 0 >"$dir/log.mark"; fi
  log "starting node $n on 127.0.0.1:$(port "$n") (controller $(controller "$n"); log in $dir/data)"
  KAFKA_HEAP_OPTS=${KAFKA_HEAP_OPTS:--Xmx512m -Xms512m} KAFKA_NODE_ID=$n KAFKA_VOTERS=$(voters) \
    KAFKA_CLUSTER_ID_FILE=$STATE/cluster.id KAFKA_REPLICATION=${#NODES[@]} \
    nohup "$KAFKA" run "$dir" "$(port "$n")" "$(controller "$n")" >"$dir/console.log" 2>&1 &
  echo $! >"$dir/node.pid"
}

# Node N has started since it was launched: Kafka logs "Kafka Server
# started" once the broker has joined the quorum and caught up its metadata.
node_started() { # node
  local dir=$STATE/node-$1
  tail -n +"$(($(cat "$dir/log.mark" 2>/dev/null || echo 0) + 1))" "$dir/server.log" 2>/dev/null |
    grep -q 'Kafka Server started'
}

up() {
  "$KAFKA" fetch >/dev/null
  mkdir -p "$STATE"
  local n waiting=()
  for n in "${NODES[@]}"; do
    if node_pid "$n" >/dev/null; then
      log "node $n already runs ($(node_pid "$n"))"
    else
      start_node "$n"
      waiting+=("$n")
    fi
  done
  for n in "${waiting[@]}"; do
    for _ in $(seq 1 1200); do
      node_started "$n" && break
      if ! node_pid "$n" >/dev/null; then
        grep -h '^kafka: ' "$STATE/node-$n/console.log" >&2 || tail -n 20 "$STATE/node-$n/console.log" >&2
        log "node $n exited before it started; see $STATE/node-$n/server.log"
        exit 1
      fi
      sleep 0.1
    done
    node_started "$n" || { log "node $n did not start within 120 s; see $STATE/node-$n/server.log"; exit 1; }
  done
  log "up: $(brokers)"
}

down() {
  # All at once: a node stopping after the others finds no quorum to hand
  # its partitions to and waits for one.
  local n pid pids=()
  for n in "${NODES[@]}"; do
    pid=$(node_pid "$n") || continue
    log "stopping node $n ($pid)"
    kill "$pid"
    pids+=("$n:$pid")
  done
  for entry in "${pids[@]}"; do
    n=${entry%%:*} pid=${entry#*:}
    for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      log "node $n did not stop in 60 s; killing it"
      kill -KILL "$pid"
    fi
    rm -f "$STATE/node-$n/node.pid"
  done
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  env) echo "export KAFKA_BROKERS=$(brokers)" ;;
  kill)
    [[ "${2:-}" =~ ^[123]$ ]] || { echo "usage: $0 kill 1|2|3" >&2; exit 2; }
    pid=$(node_pid "$2") || { log "node $2 does not run"; exit 1; }
    kill -KILL "$pid"
    log "killed node $2 ($pid)" ;;
  *) echo "usage: $0 up | down | env | kill N" >&2; exit 2 ;;
esac
