#!/usr/bin/env bash
# The main job on a fresh machine: install Chromium if needed, build aab and its
# plugins, then run `aab demo` — it starts the runtime, serves the sample web app,
# opens it in headless Chromium and drives it through observation, input, click,
# wait and capture reads, printing each step.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null 2>&1; then
  echo "Chromium is missing; installing it (apt-get install -y chromium)"
  apt-get update -qq && apt-get install -y -qq chromium
fi
cargo build --release --locked
exec target/release/aab demo "$@"
