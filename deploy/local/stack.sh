#!/usr/bin/env bash
# The local stack without Docker: a Kafka-compatible broker (tansu, built
# once from crates.io into ~/.stockledger), Redis and PostgreSQL on their
# standard loopback ports. Idempotent: whatever already runs and answers is
# kept.
#
#   deploy/local/stack.sh up      start what is missing (builds the broker once)
#   deploy/local/stack.sh down    stop the broker started here, and wait until it has
#   deploy/local/stack.sh env     print the environment the stack serves
#                                 (Redis database STOCKLEDGER_REDIS_DB, default 0)
#
# The broker keeps its log IN MEMORY: `down` (or a reboot) loses every topic,
# record and committed offset, while Redis and PostgreSQL keep their
# projections of it; `up` says so every time. STOCKLEDGER_BROKER_STORAGE=libsql
# keeps it in ~/.stockledger/broker/tansu.db (tansu's SQLite engine) instead:
# durable, but 10-20 times slower, and tansu 0.6 stops serving under heavy
# concurrent produce with it (see README, "The local stack").
# STOCKLEDGER_HOME (default ~/.stockledger), STOCKLEDGER_KAFKA_PORT (9092) and
# STOCKLEDGER_TANSU (a tansu binary to use instead of building one) move it.
set -euo pipefail

STATE=${STOCKLEDGER_HOME:-$HOME/.stockledger}
TANSU_VERSION=0.6.0
TANSU=${STOCKLEDGER_TANSU:-$STATE/tansu/bin/tansu}
KAFKA_PORT=${STOCKLEDGER_KAFKA_PORT:-9092}
REDIS_PORT=6379
PG_PORT=5432
DATABASE=${STOCKLEDGER_DATABASE:-stockledger}
STORAGE=${STOCKLEDGER_BROKER_STORAGE:-memory}

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

# The broker binary must have the SQLite engine (builds before it did not).
tansu_ready() {
  [ -x "$TANSU" ] && "$TANSU" --version 2>/dev/null | grep -q "$TANSU_VERSION" &&
    grep -qa libsql "$TANSU"
}

ensure_tansu() {
  tansu_ready && return
  if [ -n "${STOCKLEDGER_TANSU:-}" ]; then
    log "STOCKLEDGER_TANSU=$STOCKLEDGER_TANSU is not a tansu $TANSU_VERSION with the libsql engine"
    exit 1
  fi
  log "building the tansu $TANSU_VERSION broker into $STATE/tansu (about 15 minutes, once)"
  mkdir -p "$STATE"
  cargo install "tansu@$TANSU_VERSION" --locked --force --features dynostore,postgres,libsql \
    --root "$STATE/tansu" >"$STATE/tansu-build.log" 2>&1 || {
      tail -n 30 "$STATE/tansu-build.log" >&2
      log "building tansu failed; full log in $STATE/tansu-build.log"
      exit 1
    }
}

# Whether a Kafka broker answers on the port: an ApiVersions v0 request
# (correlation id 1) must come back with its correlation id within 5 s.
kafka_answers() {
  local reply
  reply=$(timeout 5 bash -c '
    exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    printf "\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\xff\xff" >&3
    head -c 8 <&3 | od -An -tx1' _ "$1" 2>/dev/null) || return 1
  [ "$(echo "$reply" | awk '{print $5 $6 $7 $8}')" = 00000001 ]
}

broker_pid() {
  local pid
  [ -f "$STATE/tansu.pid" ] && pid=$(cat "$STATE/tansu.pid") && kill -0 "$pid" 2>/dev/null &&
    echo "$pid"
}

stop_broker() {
  local pid
  pid=$(broker_pid) || { rm -f "$STATE/tansu.pid"; return 0; }
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "tansu ($pid) did not stop within 10 s of SIGTERM; killing it"
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  fi
  rm -f "$STATE/tansu.pid"
}

ensure_broker() {
  if listening "$KAFKA_PORT"; then
    if kafka_answers "$KAFKA_PORT"; then
      if broker_pid >/dev/null && [ "$(cat "$STATE/tansu.storage" 2>/dev/null)" != libsql ]; then
        log "keeping the tansu on 127.0.0.1:$KAFKA_PORT; IN-MEMORY log: every topic and offset is lost when it stops (STOCKLEDGER_BROKER_STORAGE=libsql for a durable one)"
      fi
      return
    fi
    if broker_pid >/dev/null; then
      log "the tansu started here does not answer on 127.0.0.1:$KAFKA_PORT; restarting it"
      stop_broker
    else
      log "127.0.0.1:$KAFKA_PORT is taken by something that does not answer as a Kafka broker"
      exit 1
    fi
  fi
  ensure_tansu
  local engine
  mkdir -p "$STATE/broker"
  case "$STORAGE" in
    libsql)
      engine=sqlite://tansu.db
      log "starting tansu on 127.0.0.1:$KAFKA_PORT (log kept in $STATE/broker/tansu.db; broker log in $STATE/tansu.log)"
      ;;
    memory)
      engine=memory://tansu/
      log "starting tansu on 127.0.0.1:$KAFKA_PORT (IN-MEMORY log: every topic and offset is lost when the broker stops; broker log in $STATE/tansu.log)"
      ;;
    *)
      log "STOCKLEDGER_BROKER_STORAGE must be libsql or memory, got '$STORAGE'"
      exit 2
      ;;
  esac
  # The SQLite path is relative to the broker's working directory.
  (cd "$STATE/broker" && exec nohup "$TANSU" broker \
    --listener-url "tcp://127.0.0.1:$KAFKA_PORT" \
    --advertised-listener-url "tcp://127.0.0.1:$KAFKA_PORT" \
    --storage-engine "$engine" >"$STATE/tansu.log" 2>&1) &
  echo $! >"$STATE/tansu.pid"
  echo "$STORAGE" >"$STATE/tansu.storage"
  wait_for "$KAFKA_PORT" tansu
  for _ in $(seq 1 50); do
    kafka_answers "$KAFKA_PORT" && return 0
    sleep 0.2
  done
  log "tansu listens on 127.0.0.1:$KAFKA_PORT but does not answer; see $STATE/tansu.log"
  exit 1
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
    if broker_pid >/dev/null; then
      stop_broker
      log "tansu stopped"
    fi
    ;;
  env) print_env ;;
  *)
    echo "usage: $0 up|down|env" >&2
    exit 2
    ;;
esac
