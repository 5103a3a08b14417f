#!/usr/bin/env bash
# System packages the test suite needs on a clean machine (Debian):
# - chromium: the Web provider's scenarios run in real headless Chromium;
# - nodejs / python3: script extraction runs JavaScript and Python in child processes;
# - e2fsprogs (chattr): the FactStore recovery test makes WAL files immutable;
# - adb / busybox-static: the Android simulator (sim/android) runs behind the real adb
#   server and gives each device a busybox userland;
# - a headless JRE (`java`): Android's packaging tools (apksigner, aapt's companions) run on
#   it, and a test environment that has `java` on this machine must have it on CI too;
# - aapt / apksigner / android-framework-res: the simulator's package installer verifies APKs
#   with `aapt dump badging` and `apksigner verify --print-certs`, and its tests build real APKs
#   (`aapt package -I framework-res.apk`, signed by `apksigner` with a `keytool` keystore).
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v python3 >/dev/null 2>&1 || need+=(python3)
command -v chattr >/dev/null 2>&1 || need+=(e2fsprogs)
command -v adb >/dev/null 2>&1 || need+=(adb)
{ [ -x /usr/bin/busybox ] || [ -x /bin/busybox ]; } || need+=(busybox-static)
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
command -v aapt >/dev/null 2>&1 || need+=(aapt)
command -v apksigner >/dev/null 2>&1 || need+=(apksigner)
[ -f /usr/share/android-framework-res/framework-res.apk ] || need+=(android-framework-res)
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}"
fi
