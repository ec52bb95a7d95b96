#!/usr/bin/env bash
# Builds gantry: scripts/build.sh [Release|Asan] (default Release) into build/ or build-asan/.
set -euo pipefail
cd "$(dirname "$0")/.."
type=${1:-Release}
dir=build; [ "$type" = Release ] || dir=build-$(echo "$type" | tr A-Z a-z)
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE="$type" -DGANTRY_WERROR=${GANTRY_WERROR:-ON} >/dev/null
cmake --build "$dir" -j"$(nproc)"
echo "$dir"
