#!/usr/bin/env bash
# The main job on a fresh machine: install what the demos need if it is missing, build
# aab, its plugins and the simulated phones, then run the demos:
# - `aab demo`: starts the runtime, serves the sample web app, opens it in headless
#   Chromium and drives it through observation, input, click, wait and capture reads,
#   then drives the same form with no SDK in the loop through `web-executor`;
# - `aab demo android` (as root: the simulated phone chroots its shells): starts the
#   simulated phone behind a private real adb server and walks the Android commands;
# - `aab demo ios` (no root needed): starts the simulated iPhone (devicectl/xcodebuild
#   doubles, the SDK app, the WebDriverAgent Runner) and walks the iOS commands.
# Arguments go to the Web demo (e.g. `--browser PATH`).
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
command -v adb >/dev/null 2>&1 || need+=(adb)
{ [ -x /usr/bin/busybox ] || [ -x /bin/busybox ]; } || need+=(busybox-static)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]} (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq "${need[@]}"
fi
cargo build --release --locked
cargo build --release --locked -p aab-android-sim
cargo build --release --locked -p aab-ios-sim
target/release/aab demo "$@"
if [ "$(id -u)" -eq 0 ]; then
  target/release/aab demo android
else
  echo "skipping the Android demo: the simulated phone needs root (it chroots its device shells)"
fi
target/release/aab demo ios
