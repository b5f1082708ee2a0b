#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests need, then runs them.
#   tools/install-test-deps.sh   third-party Kafka clients for tests/interop.rs (idempotent, into target/test-deps/)
#   cargo test --release         everything; tests/interop.rs runs real clients against the lockstep binary
#   mvn verify                   the Java client library (src/client/java): JUnit tests against the
#                                release binary cargo just built (Maven fetches its own dependencies)
# Validating the interop tests against Apache Kafka 4.4 instead (not part of this run):
#   tools/install-test-deps.sh --with-kafka
#   LOCKSTEP_INTEROP_TARGET=kafka cargo test --release --test interop
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-test-deps.sh
cargo test --release --all-targets 2>&1
mvn -B -q -Dstyle.color=never -f src/client/java/pom.xml verify \
  -Dlockstep.bin="$PWD/target/release/lockstep" 2>&1
