#!/usr/bin/env bash
# The local stack without Docker: a Kafka-compatible broker (tansu, built
# once from crates.io into ~/.stockledger), Redis and PostgreSQL on their
# standard loopback ports. Idempotent: whatever already runs is kept.
#
#   deploy/local/stack.sh up      start what is missing (builds the broker once)
#   deploy/local/stack.sh down    stop the broker started here
#   deploy/local/stack.sh env     print the environment the stack serves
#                                 (Redis database STOCKLEDGER_REDIS_DB, default 0)
set -euo pipefail

STATE=${STOCKLEDGER_HOME:-$HOME/.stockledger}
TANSU_VERSION=0.6.0
TANSU=$STATE/tansu/bin/tansu
KAFKA_PORT=${STOCKLEDGER_KAFKA_PORT:-9092}
REDIS_PORT=6379
PG_PORT=5432
DATABASE=${STOCKLEDGER_DATABASE:-stockledger}

log() { printf 'stack: %s\n' "$*" >&2; }

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_for() { # port what
  for _ in $(seq 1 150); do
    listening "$1" && return 0
    sleep 0.2
  done
  log "$2 did not start listening on 127.0.0.1:$1"
  return 1
}

apt_install() {
  log "installing $*"
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
  fi
}

ensure_tansu() {
  if [ -x "$TANSU" ] && "$TANSU" --version 2>/dev/null | grep -q "$TANSU_VERSION"; then
    return
  fi
  log "building the tansu $TANSU_VERSION broker into $STATE/tansu (about 15 minutes, once)"
  mkdir -p "$STATE"
  cargo install "tansu@$TANSU_VERSION" --locked --features dynostore,postgres,libsql \
    --root "$STATE/tansu" >"$STATE/tansu-build.log" 2>&1 || {
      tail -n 30 "$STATE/tansu-build.log" >&2
      log "building tansu failed; full log in $STATE/tansu-build.log"
      exit 1
    }
}

ensure_broker() {
  if listening "$KAFKA_PORT"; then
    return
  fi
  ensure_tansu
  log "starting tansu on 127.0.0.1:$KAFKA_PORT (in-memory log; log in $STATE/tansu.log)"
  nohup "$TANSU" broker \
    --listener-url "tcp://127.0.0.1:$KAFKA_PORT" \
    --advertised-listener-url "tcp://127.0.0.1:$KAFKA_PORT" \
    --storage-engine memory://tansu/ >"$STATE/tansu.log" 2>&1 &
  echo $! >"$STATE/tansu.pid"
  wait_for "$KAFKA_PORT" tansu
}

ensure_redis() {
  if listening "$REDIS_PORT"; then
    return
  fi
  command -v redis-server >/dev/null || apt_install redis-server
  log "starting redis-server on 127.0.0.1:$REDIS_PORT"
  redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" --save "" \
    --appendonly no --dir /tmp --logfile "$STATE/redis.log"
  wait_for "$REDIS_PORT" redis-server
}

ensure_postgres() {
  if ! listening "$PG_PORT"; then
    command -v pg_ctlcluster >/dev/null || apt_install postgresql
    local version
    version=$(ls /etc/postgresql | sort -V | tail -n 1)
    log "starting PostgreSQL $version on 127.0.0.1:$PG_PORT"
    pg_ctlcluster --skip-systemctl-redirect "$version" main start
    wait_for "$PG_PORT" PostgreSQL
  fi
  if ! psql -h 127.0.0.1 -U postgres -d postgres -tAc \
      "SELECT 1 FROM pg_database WHERE datname = '$DATABASE'" | grep -q 1; then
    log "creating database $DATABASE"
    psql -h 127.0.0.1 -U postgres -d postgres -qc "CREATE DATABASE \"$DATABASE\""
  fi
}

print_env() {
  echo "export KAFKA_BROKERS=127.0.0.1:$KAFKA_PORT"
  echo "export REDIS_URL=redis://127.0.0.1:$REDIS_PORT/${STOCKLEDGER_REDIS_DB:-0}"
  echo "export DATABASE_URL=postgres://postgres@127.0.0.1:$PG_PORT/$DATABASE"
}

case "${1:-up}" in
  up)
    mkdir -p "$STATE"
    ensure_redis
    ensure_postgres
    ensure_broker
    ;;
  down)
    if [ -f "$STATE/tansu.pid" ]; then
      kill "$(cat "$STATE/tansu.pid")" 2>/dev/null || true
      rm -f "$STATE/tansu.pid"
      log "tansu stopped (its in-memory log is gone)"
    fi
    ;;
  env) print_env ;;
  *)
    echo "usage: $0 up|down|env" >&2
    exit 2
    ;;
esac
