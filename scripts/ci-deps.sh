#!/usr/bin/env bash
# System packages the test suite needs on a clean machine (Debian):
# - chromium: the Web provider's scenarios run in real headless Chromium;
# - nodejs / python3: script extraction runs JavaScript and Python in child processes.
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v python3 >/dev/null 2>&1 || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}"
fi
