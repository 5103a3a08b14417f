#!/usr/bin/env bash
# The main job on a fresh machine: build aab and its plugins, start the shared
# runtime, and show what it serves. (The Web demo in real Chromium arrives with
# the Web provider; then this script runs `aab demo`.)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked
AAB=target/release/aab
echo "== aab version";            $AAB --version
echo "== plugins";                $AAB plugins list
echo "== start the runtime";      $AAB runtime --operation start
echo "== a bad argument is refused before anything runs"
$AAB runtime --operation restart || true
echo "== discovery";              $AAB --help runtime
echo "== stop the runtime";       $AAB runtime --operation stop
