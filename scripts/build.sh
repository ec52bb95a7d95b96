#!/usr/bin/env bash
# Builds gantry: scripts/build.sh [Release|Asan] (default Release) into build/ or build-asan/.
set -euo pipefail
cd "$(dirname "$0")/.."
type=${1:-Release}
dir=build; [ "$type" = Release ] || dir=build-$(echo "$type" | tr A-Z a-z)
# the CUDA backend is built whenever nvcc is there (it is compiled in CI, run on GPU machines)
if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE="$type" -DGANTRY_WERROR=${GANTRY_WERROR:-ON} >&2
cmake --build "$dir" -j"$(nproc)" >&2
echo "$dir"
