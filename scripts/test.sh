#!/usr/bin/env bash
# The test command: builds Release and ASan+UBSan, runs every test (ctest) in both.
# GANTRY_TEST_BUILDS="Release" limits the builds; extra arguments go to ctest (e.g. -R gguf).
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
for type in ${GANTRY_TEST_BUILDS:-Release Asan}; do
  dir=$(scripts/build.sh "$type")
  echo "== ctest ($type) =="
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} ctest --test-dir "$dir" --output-on-failure -j"$(nproc)" "$@" || status=1
done
exit $status
