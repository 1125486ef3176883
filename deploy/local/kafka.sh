#!/usr/bin/env bash
# Apache Kafka for the local stack and the tests: the broker's jars come from
# Maven Central through deploy/local/kafka/pom.xml, and one node runs in KRaft
# mode as broker and controller, its log on disk.
#
#   deploy/local/kafka.sh fetch
#       copy the broker's jars into ~/.stockledger/kafka-<version>/libs
#       (once, whatever STOCKLEDGER_HOME says; Maven's own cache is ~/.m2)
#       and print that directory
#   deploy/local/kafka.sh run DIR PORT CONTROLLER_PORT [SASL_PORT]
#       run a broker in the foreground on 127.0.0.1:PORT (clients) and
#       127.0.0.1:CONTROLLER_PORT (its controller), its log in DIR/data.
#       DIR/data is formatted on first use with the cluster id kept in
#       DIR/cluster.id; a log directory that belongs to another cluster is
#       refused, never deleted. KAFKA_HEAP_OPTS sets the heap (default 1 GiB),
#       KAFKA_JVM_PERFORMANCE_OPTS the collector (default Kafka's G1 settings),
#       KAFKA_GC_LOG_OPTS the collector's log (default each pause, one line,
#       in DIR/gc.log, four files of 16 MiB at most; empty: none).
#       With SASL_PORT, clients may also log in there (SASL_PLAINTEXT, PLAIN
#       or SCRAM-SHA-512) as user `stockledger`, whose password is made once
#       into DIR/sasl-password (readable by its owner only).
#       One node of a replicated cluster (deploy/local/cluster.sh) takes
#       from the environment KAFKA_NODE_ID (default 1), KAFKA_VOTERS (the
#       controller quorum, id@host:port,…; default this node alone),
#       KAFKA_CLUSTER_ID_FILE (one cluster id for every node; default
#       DIR/cluster.id) and KAFKA_REPLICATION (of the internal topics, and
#       their min.insync.replicas a majority of it; default 1).
#   deploy/local/kafka.sh scram-user DIR PORT
#       give user `stockledger` its SCRAM-SHA-512 credential (the password in
#       DIR/sasl-password) through the broker on 127.0.0.1:PORT; SCRAM
#       credentials live in the cluster's metadata, so only a running broker
#       can take them. PLAIN needs no such step.
#
# Broker settings that matter to stockledger, and the same in
# deploy/compose.yaml: no topic is created by a client's metadata request
# (`stockledger topics create` makes them), the default retention is Kafka's
# own (7 days; the command topic is created with retention.ms=-1), and the
# group coordinator's first rebalance waits Kafka's default 3 s.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
CACHE=$HOME/.stockledger
VERSION=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/kafka/pom.xml")
LIBS=$CACHE/kafka-$VERSION/libs

fail() { printf 'kafka: %s\n' "$*" >&2; exit 1; }

check_java() {
  command -v java >/dev/null ||
    fail "no java on PATH; Apache Kafka $VERSION needs Java 17 or newer (apt-get install openjdk-17-jre-headless)"
  local major
  major=$(java -XshowSettings:properties -version 2>&1 |
    sed -n 's/^ *java\.specification\.version = \([0-9]*\).*/\1/p')
  [ "${major:-0}" -ge 17 ] ||
    fail "java on PATH is Java ${major:-?}; Apache Kafka $VERSION needs Java 17 or newer (set JAVA_HOME or PATH to one)"
}

fetch() {
  [ -f "$LIBS/.complete" ] && return
  mkdir -p "$CACHE"
  # One fetch at a time: tests start brokers in parallel.
  exec 9>"$CACHE/kafka-fetch.lock"
  flock 9
  [ -f "$LIBS/.complete" ] && return
  command -v mvn >/dev/null || fail "no mvn on PATH to fetch Apache Kafka $VERSION (apt-get install maven)"
  printf 'kafka: fetching Apache Kafka %s from Maven Central into %s\n' "$VERSION" "$LIBS" >&2
  local tmp
  tmp=$(mktemp -d "$CACHE/kafka-fetch.XXXXXX")
  if ! mvn -B -q -f "$here/kafka/pom.xml" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$tmp/libs" >"$tmp/mvn.log" 2>&1; then
    tail -n 15 "$tmp/mvn.log" >&2
    fail "fetching Apache Kafka $VERSION from Maven Central failed (full log above); check the network or ~/.m2/settings.xml and run again"
  fi
  touch "$tmp/libs/.complete"
  mkdir -p "$(dirname "$LIBS")"
  rm -rf "$LIBS"
  mv "$tmp/libs" "$LIBS"
  rm -rf "$tmp"
  exec 9>&-
}

SASL_USER=stockledger

# The SASL password of DIR, made on first use (URL-safe base64, 24 bytes).
sasl_password() { # dir
  if [ ! -s "$1/sasl-password" ]; then
    (umask 077 && head -c 24 /dev/urandom | base64 | tr '+/' '-_' >"$1/sasl-password")
  fi
  cat "$1/sasl-password"
}

properties() { # dir port controller_port [sasl_port]
  local listeners="PLAINTEXT://127.0.0.1:$2" protocols=PLAINTEXT:PLAINTEXT
  if [ -n "${4:-}" ]; then
    listeners="$listeners,SASL_PLAINTEXT://127.0.0.1:$4"
    protocols="$protocols,SASL_PLAINTEXT:SASL_PLAINTEXT"
  fi
  local node=${KAFKA_NODE_ID:-1} replication=${KAFKA_REPLICATION:-1}
  local voters=${KAFKA_VOTERS:-$node@127.0.0.1:$3} min_isr=$(( ${KAFKA_REPLICATION:-1} / 2 + 1 ))
  cat <<EOF
# Written by deploy/local/kafka.sh at every start; edits are lost.
process.roles=broker,controller
node.id=$node
controller.quorum.voters=$voters
listeners=$listeners,CONTROLLER://127.0.0.1:$3
advertised.listeners=$listeners
listener.security.protocol.map=$protocols,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
log.dirs=$1/data
auto.create.topics.enable=false
offsets.topic.replication.factor=$replication
transaction.state.log.replication.factor=$replication
transaction.state.log.min.isr=$min_isr
share.coordinator.state.topic.replication.factor=$replication
share.coordinator.state.topic.min.isr=$min_isr
EOF
  [ -n "${4:-}" ] || return 0
  cat <<EOF
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$SASL_USER="$(sasl_password "$1")";
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
EOF
}

scram_user() { # dir port
  [ $# -eq 2 ] || fail "usage: $0 scram-user DIR PORT"
  local config
  config=$(umask 077 && mktemp)
  # A file, not --add-config, so the password is on no command line.
  printf 'SCRAM-SHA-512=iterations=8192,password=%s\n' "$(sasl_password "$1")" >"$config"
  if ! java -cp "$LIBS/*" -Dlog4j2.configurationFile="$1/log4j2.properties" \
      kafka.admin.ConfigCommand --bootstrap-server "127.0.0.1:$2" --alter \
      --add-config-file "$config" --entity-type users --entity-name "$SASL_USER" \
      >"$1/scram-user.log" 2>&1; then
    rm -f "$config"
    cat "$1/scram-user.log" >&2
    fail "setting the SCRAM credential of $SASL_USER failed"
  fi
  rm -f "$config"
}

log4j() { # dir
  cat <<EOF
# Written by deploy/local/kafka.sh at every start; edits are lost.
# Rolled at 64 MiB, four kept: a test run logs tens of MiB.
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = $1/server.log
appender.file.filePattern = $1/server.log.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 64MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 4
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.state.name = state.change.logger
logger.state.level = WARN
EOF
}

run() { # dir port controller_port [sasl_port]
  [ $# -eq 3 ] || [ $# -eq 4 ] || fail "usage: $0 run DIR PORT CONTROLLER_PORT [SASL_PORT]"
  local dir=$1 id recorded
  check_java
  fetch
  mkdir -p "$dir"
  # It may hold the SASL password: its owner's alone, even if it was not.
  touch "$dir/server.properties"
  chmod 600 "$dir/server.properties"
  properties "$@" >"$dir/server.properties"
  log4j "$dir" >"$dir/log4j2.properties"
  local id_file=${KAFKA_CLUSTER_ID_FILE:-$dir/cluster.id}
  if [ ! -s "$id_file" ]; then
    # Nodes of one cluster may start at once: one of them makes the id.
    (
      flock 8
      if [ ! -s "$id_file" ]; then
        java -cp "$LIBS/*" kafka.tools.StorageTool random-uuid >"$id_file.new"
        mv "$id_file.new" "$id_file"
      fi
    ) 8>"$id_file.lock"
  fi
  id=$(cat "$id_file")
  if [ -f "$dir/data/meta.properties" ]; then
    recorded=$(sed -n 's/^cluster\.id=//p' "$dir/data/meta.properties")
    [ "$recorded" = "$id" ] ||
      fail "the log in $dir/data belongs to cluster $recorded, not $id (from $id_file); put that cluster's id back in $id_file, or move $dir/data away to start an empty log"
  elif [ -n "$(ls -A "$dir/data" 2>/dev/null)" ]; then
    fail "$dir/data holds files but no meta.properties, so it is no Kafka log; move it away to start an empty log"
  else
    java -cp "$LIBS/*" -Dlog4j2.configurationFile="$dir/log4j2.properties" \
      kafka.tools.StorageTool format --cluster-id "$id" --config "$dir/server.properties" \
      >"$dir/format.log" 2>&1 ||
      { cat "$dir/format.log" >&2; fail "formatting $dir/data failed"; }
  fi
  # The JVM settings of Kafka's own bin/kafka-run-class.sh, overridden the
  # same way (KAFKA_HEAP_OPTS, KAFKA_JVM_PERFORMANCE_OPTS). Its collector's
  # pauses stop every request for their length (10-20 ms on a 2-core
  # machine under the latency scenarios): the log says when and how long.
  local gc_log=${KAFKA_GC_LOG_OPTS--Xlog:gc:file=$dir/gc.log:time,uptime:filecount=4,filesize=16m}
  # shellcheck disable=SC2086
  exec java ${KAFKA_HEAP_OPTS:--Xmx1G -Xms1G} \
    ${KAFKA_JVM_PERFORMANCE_OPTS:--server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent} \
    $gc_log \
    -Djava.awt.headless=true -Dlog4j2.configurationFile="$dir/log4j2.properties" \
    -cp "$LIBS/*" kafka.Kafka "$dir/server.properties"
}

case "${1:-}" in
  fetch) check_java; fetch; echo "$LIBS" ;;
  run) shift; run "$@" ;;
  scram-user) shift; check_java; fetch; scram_user "$@" ;;
  *) echo "usage: $0 fetch | run DIR PORT CONTROLLER_PORT [SASL_PORT] | scram-user DIR PORT" >&2; exit 2 ;;
esac
