#!/usr/bin/env bash
# tests/deploy/systemd_verify.sh BUILD_DIR — `systemd-analyze verify` on docker/systemd/*.service
# (template units as an instance), with the programs installed into a temporary prefix and the
# units' /usr/local/bin paths pointed there, so a unit that runs a program that does not exist
# (gantry-engine-serve) fails. Exit 77 without systemd-analyze (Debian package systemd; it
# verifies offline, also in a container without systemd as PID 1), unless
# GANTRY_REQUIRE_SYSTEMD_ANALYZE=1 (CI, which installs it): then its absence is a failure.
set -euo pipefail
BUILD=${1:?build dir}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
if ! command -v systemd-analyze >/dev/null; then
  [ "${GANTRY_REQUIRE_SYSTEMD_ANALYZE:-0}" = 1 ] && { echo "FAIL: no systemd-analyze (install the systemd package)"; exit 1; }
  echo "no systemd-analyze: skipped"
  exit 77
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cmake --install "$BUILD" --prefix "$TMP/prefix" >/dev/null
mkdir -p "$TMP/units"
for u in "$SRC"/docker/systemd/*.service; do
  name=$(basename "$u")
  case "$name" in *@.service) name=${name%@.service}@demo.service ;; esac
  sed "s#/usr/local/bin/#$TMP/prefix/bin/#g" "$u" >"$TMP/units/$name"
done
status=0
for u in "$TMP"/units/*.service; do
  # warnings about the users/env files of the target host are fine; errors about the unit are not
  out=$(SYSTEMD_LOG_LEVEL=warning systemd-analyze verify --man=no "$u" 2>&1) || true
  bad=$(grep -E "$(basename "$u")|is not executable|No such file|Failed to" <<<"$out" | grep -v 'EnvironmentFile' || true)
  if [ -n "$bad" ]; then
    echo "FAIL: $(basename "$u")"
    echo "$bad"
    status=1
  else
    echo "ok: $(basename "$u")"
  fi
done
exit $status
