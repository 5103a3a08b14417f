#!/usr/bin/env bash
# The whole test suite. Builds every workspace member first: the end-to-end suite
# runs the real `aab` binary and loads the real plugin and fixture cdylibs.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace --all-targets --locked
cargo test --workspace --locked -- --test-threads=2
