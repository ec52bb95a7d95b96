#!/bin/sh
# Builds the CUDA test and bench programs here (nvcc, no GPU needed) and packs them with the
# shared libraries the GPU machine lacks into build-cuda-dist/ and, compressed, into
# build-cuda-pack/dist.tar.xz (both ignored by git): carry build-cuda-pack to the device and run
# scripts/gpu/suite.sh there.
# Default TARGETS: what scripts/gpu/suite.sh runs (the GPU tests of gpu_tests.sh, kernel
# microbenchmarks, bench_decode, gantry-mkmodel, and for SERVE=1 gantry-engine + engine-bench as
# its gRPC client).
# Shared libraries: every one ldd lists for the programs except glibc / libstdc++ / libgcc and
# CUDA's own (the GPU machine has those), so gRPC, protobuf-c, absl, ... travel along.
set -eu
SRC=$(cd "$(dirname "$0")/../.." && pwd)
B=${BUILD:-$SRC/build-cuda}
D=$SRC/build-cuda-dist
cmake -S "$SRC" -B "$B" -DGANTRY_WERROR=ON >/dev/null
if [ -z "${TARGETS:-}" ]; then
  . "$SRC/scripts/gpu/gpu_tests.sh"
  TARGETS="$GPU_TESTS bench_comm bench_constraint bench_matvec bench_gdn_scan bench_attn bench_decode gantry-mkmodel"
  TARGETS="$TARGETS gantry-engine engine-bench"
  # STACK=1: the serving path (scripts/gpu/stack.sh): router, CLI, and this machine's redis-server
  [ "${STACK:-0}" = 1 ] && TARGETS="$TARGETS gantry-router gantry"
fi
cmake --build "$B" -j2 --target $TARGETS
rm -rf "$D" && mkdir -p "$D/lib"
for t in $TARGETS; do cp "$B/$t" "$D/"; done
EXTRA=
[ "${STACK:-0}" = 1 ] && EXTRA=$(command -v redis-server) && cp "$EXTRA" "$D/"
{ for t in $TARGETS; do ldd "$B/$t"; done; [ -n "$EXTRA" ] && ldd "$EXTRA"; } | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so|/cuda[^/]*/|libcuda\.so|libcublas' |
  while read -r l; do cp -L "$l" "$D/lib/"; done
strip "$D"/* 2>/dev/null || true
echo "commit $(git -C "$SRC" rev-parse --short HEAD)$(git -C "$SRC" diff --quiet HEAD -- 2>/dev/null || echo +dirty)" >"$D/COMMIT"
# the device call carries at most 64 MiB with the tree: ship the programs compressed
mkdir -p "$SRC/build-cuda-pack"
# xz with a 256 MiB dictionary (one thread: threads split the input) folds the near-identical CUDA
# binaries into one: twelve test and bench programs, 202 MB, pack to 9.4 MB (15 MB with xz -9)
tar -C "$SRC" -cf - build-cuda-dist | xz -T1 --lzma2=preset=9,dict=256MiB >"$SRC/build-cuda-pack/dist.tar.xz"
du -sh "$D" "$SRC/build-cuda-pack/dist.tar.xz"
