#!/usr/bin/env bash
# tests/deploy/install_check.sh BUILD_DIR — `cmake --install` into a temporary prefix, then every
# installed program must answer --help with exit 0 and usage text (they link and start from the
# prefix), and the systemd units must be installed.
set -euo pipefail
BUILD=${1:?build dir}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cmake --install "$BUILD" --prefix "$TMP" >/dev/null
n=0
for p in "$TMP"/bin/*; do
  out=$("$p" --help 2>&1) || { echo "FAIL: $(basename "$p") --help exited $?"; echo "$out" | head -5; exit 1; }
  grep -qi 'usage' <<<"$out" || { echo "FAIL: $(basename "$p") --help prints no usage"; exit 1; }
  echo "ok: $(basename "$p") --help"
  n=$((n + 1))
done
[ "$n" -ge 5 ] || { echo "FAIL: only $n programs installed"; ls -l "$TMP/bin"; exit 1; }
ls "$TMP"/share/gantry/systemd/*.service >/dev/null || { echo "FAIL: no systemd units installed"; exit 1; }
for p in gantry gantry-router gantry-engine gantry-quantize gantry-mkmodel; do
  "$TMP/bin/$p" --version | grep -q "^$p [0-9]" || { echo "FAIL: $p --version"; exit 1; }
  echo "ok: $p --version"
done
# subcommands answer --help too (gantry chat said "--help needs a value")
for sub in "gantry chat" "gantry limits" "gantry bench" "gantry-engine serve" "gantry-engine generate"; do
  set -- $sub
  out=$("$TMP/bin/$1" "${@:2}" --help 2>&1) || { echo "FAIL: $sub --help exited $?: $out" | head -3; exit 1; }
  grep -qi 'usage' <<<"$out" || { echo "FAIL: $sub --help prints no usage"; exit 1; }
  echo "ok: $sub --help"
done
echo "installed and ran $n programs"
