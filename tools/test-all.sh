#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests need, then runs them.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --release --all-targets 2>&1
