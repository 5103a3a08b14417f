#!/usr/bin/env bash
# The whole test suite. Builds every workspace member first: the end-to-end suite
# runs the real `aab` binary and loads the real plugin and fixture cdylibs.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace --all-targets --locked
# The out-of-tree example provider (own Cargo project and lockfile). Its target dir is
# the one the e2e suite builds it into, so its dependencies compile once.
CARGO_TARGET_DIR=target/private-provider cargo test --manifest-path examples/private-provider/Cargo.toml --locked -- --test-threads=2
# (aab-webdriver's integration tests need its `servers` feature; the e2e suite's
# dev-dependency enables it for the whole workspace build, so they run here too.)
cargo test --workspace --locked --no-fail-fast -- --test-threads=2
