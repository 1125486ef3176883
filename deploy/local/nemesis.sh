#!/usr/bin/env bash
# The nemesis: the whole pipeline on a replicated Apache Kafka (three KRaft
# nodes of its own, topics replicated three times with two in sync), its
# processes run as `stockledger apply | archive | serve`, Redis and
# PostgreSQL reached through proxies, under a mixed workload (scarce SKUs
# that sell out again and again, limits, holds, seats, locations, baskets)
# while a seeded schedule kills appliers, archivers, gateways and brokers
# (the leader of the busiest partition included), pauses the applier past
# its session timeout, cuts the path to PostgreSQL, hands a Redis Cluster
# master over to its replica or kills it (or, with --redis one, cuts the
# path to the one Redis), and adds and removes an applier.
# At the end it heals everything, waits until every record is decided and
# every hold has ended, and compares every outcome and archived row with
# the fold of the log.
#
#   deploy/local/nemesis.sh --minutes 30 --seed 42
#   deploy/local/nemesis.sh --minutes 5          # a seed drawn and printed
#   deploy/local/nemesis.sh --minutes 5 --redis one
#
# The schedule is printed first; the same seed replays the same schedule.
# The last line begins `nemesis:` and says `lost N`, `doubled N`,
# `sold-out crossings N`, `oversold N`, `outcomes differ N` and `rows
# differ N`; the exit status is 0 only if every check held and the run
# reached its minimums. The whole output is kept in
# ~/.stockledger/nemesis/seed-S-REDIS.log, each process's log in the system's
# temporary directory (named in the output).
set -euo pipefail
cd "$(dirname "$0")/../.."

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

minutes=30
seed=""
redis=cluster
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes=${2:-}; shift 2 || { echo "nemesis.sh: --minutes needs a value" >&2; exit 2; } ;;
    --seed) seed=${2:-}; shift 2 || { echo "nemesis.sh: --seed needs a value" >&2; exit 2; } ;;
    --redis) redis=${2:-}; shift 2 || { echo "nemesis.sh: --redis needs a value" >&2; exit 2; } ;;
    -h|--help) usage; exit 0 ;;
    *) echo "nemesis.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if ! [[ $minutes =~ ^[0-9]+([.][0-9]+)?$ ]] || [ "$(awk "BEGIN{print ($minutes > 0 && $minutes <= 1440)}")" != 1 ]; then
  echo "nemesis.sh: --minutes $minutes: a number of minutes above 0, at most 1440" >&2
  exit 2
fi
case "$redis" in
  cluster|one) ;;
  *) echo "nemesis.sh: --redis $redis: cluster (three masters with a replica each) or one" >&2; exit 2 ;;
esac
if [ -z "$seed" ]; then
  seed=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
fi
if ! [[ $seed =~ ^[0-9]{1,19}$ ]]; then
  echo "nemesis.sh: --seed $seed: a whole number of at most 19 digits" >&2
  exit 2
fi

deploy/local/stack.sh up
# The tests' Redis database, as deploy/local/test.sh uses: set before the
# stack's environment, which puts it in REDIS_URL.
export STOCKLEDGER_REDIS_DB=${STOCKLEDGER_REDIS_DB:-15}
eval "$(deploy/local/stack.sh env)"
export STOCKLEDGER_NEMESIS_SEED=$seed STOCKLEDGER_NEMESIS_MINUTES=$minutes STOCKLEDGER_NEMESIS_REDIS=$redis
out_dir=${STOCKLEDGER_HOME:-$HOME/.stockledger}/nemesis
mkdir -p "$out_dir"
out=$out_dir/seed-$seed-$redis.log
echo "nemesis.sh: seed $seed, $minutes min, Redis: $redis; output in $out" >&2
set +e
cargo test --locked -p stockledger-cli --test nemesis -- \
  --ignored --exact nemesis --nocapture 2>&1 | tee "$out"
status=${PIPESTATUS[0]}
set -e
line=$(grep '^nemesis:' "$out" | tail -n 1 || true)
if [ -z "$line" ]; then
  line="nemesis: seed $seed, did not finish (see $out), lost unknown, doubled unknown"
  status=1
fi
echo "$line"
exit "$status"
