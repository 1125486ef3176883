#!/usr/bin/env bash
# The local stack without Docker: a Kafka broker, Redis and PostgreSQL on their
# standard loopback ports. Idempotent: whatever already runs and answers is
# kept.
#
#   deploy/local/stack.sh up      start what is missing (fetches the broker once)
#   deploy/local/stack.sh down    stop the broker started here, and wait until it has
#   deploy/local/stack.sh env     print the environment the stack serves
#                                 (Redis database STOCKLEDGER_REDIS_DB, default 0)
#
# The broker is Apache Kafka (deploy/local/kafka.sh: jars from Maven Central,
# one KRaft node), its log on disk in ~/.stockledger/kafka/data: it survives
# `down`, `up` and a crash. STOCKLEDGER_BROKER=tansu runs tansu 0.6 instead
# (built once from crates.io, about 15 minutes), whose log is IN MEMORY unless
# STOCKLEDGER_BROKER_STORAGE=libsql keeps it in ~/.stockledger/broker/tansu.db
# (10-20 times slower; see docs/operators.md, "The local stack").
# Apache Kafka also takes SASL logins (PLAIN, SCRAM-SHA-512) on 9094 as user
# stockledger, password in ~/.stockledger/kafka/sasl-password; `env` says how.
# STOCKLEDGER_HOME (default ~/.stockledger), STOCKLEDGER_KAFKA_PORT (9092),
# STOCKLEDGER_KAFKA_CONTROLLER_PORT (9093, Apache Kafka's controller),
# STOCKLEDGER_KAFKA_SASL_PORT (9094) and STOCKLEDGER_TANSU (a tansu binary to
# use instead of building one) move it.
set -euo pipefail

STATE=${STOCKLEDGER_HOME:-$HOME/.stockledger}
TANSU_VERSION=0.6.0
TANSU=${STOCKLEDGER_TANSU:-$STATE/tansu/bin/tansu}
KAFKA_PORT=${STOCKLEDGER_KAFKA_PORT:-9092}
CONTROLLER_PORT=${STOCKLEDGER_KAFKA_CONTROLLER_PORT:-9093}
SASL_PORT=${STOCKLEDGER_KAFKA_SASL_PORT:-9094}
BROKER=${STOCKLEDGER_BROKER:-kafka}
KAFKA=$(cd "$(dirname "$0")" && pwd)/kafka.sh
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

# The broker started here: its pid, and which one it is ("kafka" or "tansu").
broker_pid() {
  local pid
  [ -f "$STATE/broker.pid" ] && pid=$(cat "$STATE/broker.pid") && kill -0 "$pid" 2>/dev/null &&
    echo "$pid"
}

broker_kind() {
  if broker_pid >/dev/null && [ -f "$STATE/broker.kind" ]; then
    cat "$STATE/broker.kind"
  elif listening "$KAFKA_PORT"; then
    echo "not started here"
  else
    echo "none running"
  fi
}

stop_broker() {
  local pid
  pid=$(broker_pid) || { rm -f "$STATE/broker.pid"; return 0; }
  kill "$pid" 2>/dev/null || true
  # Apache Kafka's controlled shutdown flushes and closes every log.
  for _ in $(seq 1 600); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "the broker ($pid) did not stop within 60 s of SIGTERM; killing it"
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  fi
  rm -f "$STATE/broker.pid"
}

# Waits until the broker started as $1 answers, or says why it did not.
await_broker() { # pid what log
  for _ in $(seq 1 600); do
    kafka_answers "$KAFKA_PORT" && return 0
    if ! kill -0 "$1" 2>/dev/null; then
      grep -h '^kafka: ' "$3" >&2 || tail -n 20 "$3" >&2
      log "$2 exited before it answered on 127.0.0.1:$KAFKA_PORT; see $3"
      rm -f "$STATE/broker.pid"
      exit 1
    fi
    sleep 0.1
  done
  log "$2 does not answer on 127.0.0.1:$KAFKA_PORT within 60 s; see $3"
  exit 1
}

start_kafka() {
  if listening "$CONTROLLER_PORT"; then
    log "127.0.0.1:$CONTROLLER_PORT, the port of Apache Kafka's controller, is taken; stop what holds it or set STOCKLEDGER_KAFKA_CONTROLLER_PORT"
    exit 1
  fi
  if listening "$SASL_PORT"; then
    log "127.0.0.1:$SASL_PORT, the port of Apache Kafka's SASL listener, is taken; stop what holds it or set STOCKLEDGER_KAFKA_SASL_PORT"
    exit 1
  fi
  local libs version
  libs=$("$KAFKA" fetch) || exit 1
  version=${libs%/libs}
  version=${version##*/kafka-}
  mkdir -p "$STATE/kafka"
  log "starting Apache Kafka $version on 127.0.0.1:$KAFKA_PORT (log kept in $STATE/kafka/data; broker log in $STATE/kafka/server.log)"
  nohup "$KAFKA" run "$STATE/kafka" "$KAFKA_PORT" "$CONTROLLER_PORT" "$SASL_PORT" \
    >"$STATE/kafka/console.log" 2>&1 &
  echo $! >"$STATE/broker.pid"
  echo "kafka $version" >"$STATE/broker.kind"
  await_broker "$!" "Apache Kafka" "$STATE/kafka/console.log"
  "$KAFKA" scram-user "$STATE/kafka" "$KAFKA_PORT"
}

start_tansu() {
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
  esac
  # The SQLite path is relative to the broker's working directory.
  (cd "$STATE/broker" && exec nohup "$TANSU" broker \
    --listener-url "tcp://127.0.0.1:$KAFKA_PORT" \
    --advertised-listener-url "tcp://127.0.0.1:$KAFKA_PORT" \
    --storage-engine "$engine" >"$STATE/tansu.log" 2>&1) &
  echo $! >"$STATE/broker.pid"
  echo "tansu $TANSU_VERSION $STORAGE" >"$STATE/broker.kind"
  await_broker "$!" tansu "$STATE/tansu.log"
}

ensure_broker() {
  if listening "$KAFKA_PORT"; then
    if kafka_answers "$KAFKA_PORT"; then
      if broker_pid >/dev/null; then
        case "$(broker_kind)" in
          "$BROKER "*) ;;
          *)
            log "a $(broker_kind) broker started here runs on 127.0.0.1:$KAFKA_PORT, not $BROKER: run \`deploy/local/stack.sh down\` first to switch"
            exit 1 ;;
        esac
        case "$(broker_kind)" in
          kafka*)
            if ! listening "$SASL_PORT"; then
              log "the Apache Kafka started here has no SASL listener on 127.0.0.1:$SASL_PORT (it predates it); restarting it"
              stop_broker
              start_kafka
              return
            fi ;;
        esac
        case "$(broker_kind)" in
          "tansu $TANSU_VERSION memory")
            log "keeping the tansu on 127.0.0.1:$KAFKA_PORT; IN-MEMORY log: every topic and offset is lost when it stops" ;;
          *) log "keeping the $(broker_kind) broker on 127.0.0.1:$KAFKA_PORT" ;;
        esac
      else
        log "keeping the Kafka broker that answers on 127.0.0.1:$KAFKA_PORT (not started here)"
      fi
      return
    fi
    if broker_pid >/dev/null; then
      log "the broker started here does not answer on 127.0.0.1:$KAFKA_PORT; restarting it"
      stop_broker
    else
      log "127.0.0.1:$KAFKA_PORT is taken by something that does not answer as a Kafka broker; stop it or set STOCKLEDGER_KAFKA_PORT"
      exit 1
    fi
  fi
  case "$BROKER" in
    kafka) start_kafka ;;
    tansu) start_tansu ;;
  esac
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
  pg_login
  if ! psql "$(pg_url postgres)" -tAc \
      "SELECT 1 FROM pg_database WHERE datname = '$DATABASE'" | grep -q 1; then
    log "creating database $DATABASE"
    psql "$(pg_url postgres)" -qc "CREATE DATABASE \"$DATABASE\""
  fi
  # The archive's two roles (migrations/0007_least_privilege.sql) are
  # cluster-wide: made here once, so that databases migrated at the same
  # time (the tests make one each) never race to create them on a
  # cluster that has neither yet.
  local role
  for role in stockledger_analyst stockledger_archiver; do
    if ! psql "$(pg_url postgres)" -tAc \
        "SELECT 1 FROM pg_roles WHERE rolname = '$role'" | grep -q 1; then
      psql "$(pg_url postgres)" -qc "CREATE ROLE $role NOLOGIN"
    fi
  done
}

# The role the stack connects as, over loopback: postgres, without a password
# where the server trusts loopback, else with the password PG_PASSWORD
# (Debian's own cluster asks for one; `up` sets it through the local socket,
# as the postgres system user, when that role has none that works).
PG_PASSWORD=stockledger
pg_url() { # database
  if pg_answers ""; then
    echo "postgres://postgres@127.0.0.1:$PG_PORT/$1"
  else
    echo "postgres://postgres:$PG_PASSWORD@127.0.0.1:$PG_PORT/$1"
  fi
}

pg_answers() { # password
  PGPASSWORD=$1 PGCONNECT_TIMEOUT=5 psql -w -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres \
    -tAc 'SELECT 1' >/dev/null 2>&1
}

pg_login() {
  pg_answers "" || pg_answers "$PG_PASSWORD" && return
  if [ "$(id -u)" = 0 ] && command -v runuser >/dev/null; then
    log "setting the password of PostgreSQL's postgres role to '$PG_PASSWORD' for loopback connections (local development only)"
    runuser -u postgres -- psql -qc "ALTER ROLE postgres PASSWORD '$PG_PASSWORD'" && return
  fi
  log "cannot log in to PostgreSQL on 127.0.0.1:$PG_PORT as postgres, with no password or '$PG_PASSWORD'; give that role that password (ALTER ROLE postgres PASSWORD '$PG_PASSWORD') or trust loopback in pg_hba.conf"
  exit 1
}

print_env() {
  echo "# broker: $(broker_kind)"
  echo "export KAFKA_BROKERS=127.0.0.1:$KAFKA_PORT"
  echo "export REDIS_URL=redis://127.0.0.1:$REDIS_PORT/${STOCKLEDGER_REDIS_DB:-0}"
  echo "export DATABASE_URL=$(pg_url "$DATABASE")"
  case "$(broker_kind)" in
    kafka*)
      echo "# SASL logins (PLAIN, SCRAM-SHA-512) as user stockledger, with:"
      echo "#   KAFKA_BROKERS=127.0.0.1:$SASL_PORT KAFKA_SASL_PASSWORD_FILE=$STATE/kafka/sasl-password"
      echo "#   KAFKA_PROPERTIES='security.protocol=SASL_PLAINTEXT;sasl.mechanisms=SCRAM-SHA-512;sasl.username=stockledger'"
      echo "export STOCKLEDGER_SASL_BROKERS=127.0.0.1:$SASL_PORT"
      echo "export STOCKLEDGER_SASL_PASSWORD_FILE=$STATE/kafka/sasl-password"
      ;;
  esac
}

case "$BROKER" in
  kafka | tansu) ;;
  *) log "STOCKLEDGER_BROKER must be kafka or tansu, got '$BROKER'"; exit 2 ;;
esac
case "$STORAGE" in
  libsql | memory) ;;
  *) log "STOCKLEDGER_BROKER_STORAGE must be libsql or memory, got '$STORAGE'"; exit 2 ;;
esac

case "${1:-up}" in
  up)
    mkdir -p "$STATE"
    ensure_redis
    ensure_postgres
    ensure_broker
    ;;
  down)
    if broker_pid >/dev/null; then
      kind=$(broker_kind)
      stop_broker
      log "$kind broker stopped"
    fi
    ;;
  env) print_env ;;
  *)
    echo "usage: $0 up|down|env" >&2
    exit 2
    ;;
esac
