#!/bin/sh
# Builds the CUDA test and bench programs here (nvcc, no GPU needed) and packs them with the
# shared libraries the GPU machine lacks into build-cuda-dist/ and, compressed, into
# build-cuda-pack/dist.tar.xz (both ignored by git): carry build-cuda-pack to the device and run
# scripts/gpu/suite.sh there. BUILD: the build directory (default build-cuda).
# Default TARGETS: what scripts/gpu/suite.sh runs (the GPU tests of gpu_tests.sh, kernel
# microbenchmarks, bench_decode, gantry-mkmodel, and for SERVE=1 gantry-engine + engine-bench as
# its gRPC client).
# Shared libraries: every one ldd lists for the programs except glibc / libstdc++ / libgcc and
# CUDA's own (the GPU machine has those), so gRPC, protobuf-c, absl, ... travel along.
# STACK=1 (scripts/gpu/stack.sh): gantry-router, gantry, this machine's redis-server and the
# libraries only they need (libcurl's family, systemd's: ~10 MB packed) go into a second pack,
# build-cuda-stack/stack.tar.xz: both packs beside the 56.7 MB of tracked files pass the 64 MiB
# a device call carries only when the CUDA pack is small. Otherwise carry build-cuda-pack in one
# call and build-cuda-stack in the next while the machine is warm (build-cuda-dist stays there):
# suite.sh / stack.sh unpack stack.tar.xz over build-cuda-dist.
set -eu
SRC=$(cd "$(dirname "$0")/../.." && pwd)
B=${BUILD:-$SRC/build-cuda}
D=$SRC/build-cuda-dist
# machine code for sm_90 only, no PTX and no line tables: programs a quarter of the size (the
# 64 MiB a device call carries); PACK_CMAKE_ARGS="" keeps the build's own settings
cmake -S "$SRC" -B "$B" -DGANTRY_WERROR=ON ${PACK_CMAKE_ARGS--DCMAKE_CUDA_ARCHITECTURES=90-real -DGANTRY_CUDA_LINEINFO=OFF} >/dev/null
if [ -z "${TARGETS:-}" ]; then
  . "$SRC/scripts/gpu/gpu_tests.sh"
  TARGETS="$GPU_TESTS bench_comm bench_constraint bench_matvec bench_gdn_scan bench_attn bench_decode gantry-mkmodel"
  TARGETS="$TARGETS gantry-engine engine-bench"
fi
STACK_TARGETS=
[ "${STACK:-0}" = 1 ] && STACK_TARGETS="gantry-router gantry"
cmake --build "$B" -j2 --target $TARGETS $STACK_TARGETS
# the shared libraries programs need (paths), less the ones every machine has
libs_of() {
  for t in "$@"; do ldd "$t"; done | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so|/cuda[^/]*/|libcuda\.so|libcublas' || true
}
rm -rf "$D" && mkdir -p "$D/lib"
for t in $TARGETS; do cp "$B/$t" "$D/"; done
libs_of $(for t in $TARGETS; do echo "$B/$t"; done) >"$D/lib/.list"
while read -r l; do cp -L "$l" "$D/lib/"; done <"$D/lib/.list"
strip "$D"/* 2>/dev/null || true
echo "commit $(git -C "$SRC" rev-parse --short HEAD)$(git -C "$SRC" diff --quiet HEAD -- 2>/dev/null || echo +dirty)" >"$D/COMMIT"
# the device call carries at most 64 MiB with the tree: ship the programs compressed
mkdir -p "$SRC/build-cuda-pack"
# xz with a 256 MiB dictionary (one thread: threads split the input) folds the near-identical CUDA
# binaries into one: the default programs pack to 7.8 MB (accc449, kernels/README.md); before the
# sm_90-only build, 202 MB packed to 9.4 MB here and to 15 MB with plain xz -9
tar -C "$SRC" -cf - build-cuda-dist | xz -T1 --lzma2=preset=9,dict=256MiB >"$SRC/build-cuda-pack/dist.tar.xz"
du -sh "$D" "$SRC/build-cuda-pack/dist.tar.xz"
if [ -n "$STACK_TARGETS" ]; then
  S=$SRC/build-cuda-stack/tree
  rm -rf "$SRC/build-cuda-stack" && mkdir -p "$S/build-cuda-dist/lib"
  R=$(command -v redis-server)
  for t in $STACK_TARGETS; do cp "$B/$t" "$S/build-cuda-dist/"; done
  cp "$R" "$S/build-cuda-dist/"
  libs_of $(for t in $STACK_TARGETS; do echo "$B/$t"; done) "$R" | { grep -vxF -f "$D/lib/.list" || true; } |
    while read -r l; do cp -L "$l" "$S/build-cuda-dist/lib/"; done
  strip "$S/build-cuda-dist"/* 2>/dev/null || true
  cp "$D/COMMIT" "$S/build-cuda-dist/COMMIT.stack"
  tar -C "$S" -cf - build-cuda-dist | xz -T1 --lzma2=preset=9,dict=256MiB >"$SRC/build-cuda-stack/stack.tar.xz"
  rm -rf "$S"
  du -sh "$SRC/build-cuda-stack/stack.tar.xz"
fi
