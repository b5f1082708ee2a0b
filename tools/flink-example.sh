#!/usr/bin/env bash
# tools/flink-example.sh — the Flink source in one command.
#
# Starts the release broker on a free loopback port with a temporary data directory, runs
# io.lockstep.flink.example.ShareSourceExample against it (1 000 orders produced; a local Flink job,
# parallelism 2, checkpoint every 500 ms, reads them from a share group with LockstepShareSource into
# an exactly-once file sink while its map fails once; then the same job again on the same group),
# prints what happened, stops the broker and removes the directory (KEEP=1 keeps it).
#
# Needs target/release/lockstep (cargo build --release --bin lockstep; or LOCKSTEP_BIN), Java 17, Maven.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${LOCKSTEP_BIN:-$PWD/target/release/lockstep}"
if [[ ! -x $bin ]]; then
  echo "flink-example: no broker binary at $bin (cargo build --release --bin lockstep)" >&2
  exit 2
fi
work=$(mktemp -d -t lockstep-flink-example.XXXXXX)
broker=
cleanup() {
  if [[ -n $broker ]]; then kill "$broker" 2>/dev/null || true; wait "$broker" 2>/dev/null || true; fi
  if [[ ${KEEP:-0} == 1 ]]; then echo "flink-example: kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

echo "flink-example: building the Maven modules (clients, flink)"
mvn -B -q -Dstyle.color=never -f src/client/java/pom.xml -pl flink -am test-compile dependency:build-classpath \
  -Dmdep.outputFile="$work/classpath" -Dmdep.includeScope=test

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$bin" --listen "127.0.0.1:$port" --data-dir "$work/data" >"$work/broker.out" 2>"$work/broker.log" &
broker=$!
for _ in $(seq 300); do
  grep -q '^lockstep ready' "$work/broker.out" 2>/dev/null && break
  kill -0 "$broker" 2>/dev/null || { echo "flink-example: broker exited; see its log:" >&2; cat "$work/broker.log" >&2; exit 1; }
  sleep 0.1
done
echo "flink-example: $(head -1 "$work/broker.out")"

m=src/client/java/flink/target
java -cp "$m/test-classes:$m/classes:$(cat "$work/classpath")" \
  -Dorg.slf4j.simpleLogger.defaultLogLevel=error \
  -Dorg.slf4j.simpleLogger.log.io.lockstep.flink=info \
  io.lockstep.flink.example.ShareSourceExample "127.0.0.1:$port" "$work/output"
