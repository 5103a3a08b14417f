#!/usr/bin/env bash
# One plugin bundle for this platform from a release build (docs/PACKAGING.md):
#   scripts/bundle-plugins.sh [OUT_DIR]
# builds `cargo build --release --locked` (aab and the platform plugins), then
#   target/release/aab plugins bundle --from target/release --out OUT_DIR --id aab-plugins --version <aab version>
# OUT_DIR defaults to dist/aab-plugins-<aab version>-<os>-<arch> and must not exist.
# The bundle is checked by loading every plugin, so run it on the platform it is for
# (one CI job per platform). AAB_BUNDLE_PROFILE=dev bundles a debug build instead.
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${AAB_BUNDLE_PROFILE:-release}"
if [ "$profile" = release ]; then
  cargo build --release --locked
  dir=target/release
else
  cargo build --profile "$profile" --locked
  case "$profile" in dev) dir=target/debug ;; *) dir="target/$profile" ;; esac
fi
version="$("$dir/aab" --version | awk '{print $2}')"
platform="$(uname -s | tr '[:upper:]' '[:lower:]')-$(uname -m)"
out="${1:-dist/aab-plugins-$version-$platform}"
mkdir -p "$(dirname "$out")"
# Only libaab_plugin_*.so files are bundled; test fixtures (libaab_fixture_*) never are.
env -u AI_APP_BRIDGE_PLUGIN_DIR "$dir/aab" plugins bundle --from "$dir" --out "$out" --id aab-plugins --version "$version"
echo
"$dir/aab" plugins verify "$out" >/dev/null
echo "bundle: $out" >&2
