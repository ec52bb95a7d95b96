#!/bin/sh
# Builds the CUDA test and bench programs here (nvcc, no GPU needed) and packs them with the
# shared libraries the GPU machine lacks into build-cuda-dist/ and, compressed, into
# build-cuda-pack/dist.tar.xz (both ignored by git): carry build-cuda-pack to the device and run
# scripts/gpu/device_run.sh there.
# TARGETS="test_cuda_ops test_cuda_golden bench_decode gantry-mkmodel" for the full session.
set -eu
SRC=$(cd "$(dirname "$0")/../.." && pwd)
B=${BUILD:-$SRC/build-cuda}
D=$SRC/build-cuda-dist
cmake -S "$SRC" -B "$B" -DGANTRY_WERROR=ON >/dev/null
TARGETS=${TARGETS:-"test_cuda_ops test_cuda_golden"}
cmake --build "$B" -j2 --target $TARGETS
rm -rf "$D" && mkdir -p "$D/lib"
for t in $TARGETS; do cp "$B/$t" "$D/"; done
for l in libcmocka.so.0 libjansson.so.4 libgomp.so.1; do cp -L "/lib/x86_64-linux-gnu/$l" "$D/lib/"; done
strip "$D"/* 2>/dev/null || true
# the device call carries at most 64 MiB with the tree: ship the programs compressed
mkdir -p "$SRC/build-cuda-pack"
tar -C "$SRC" -cJf "$SRC/build-cuda-pack/dist.tar.xz" build-cuda-dist
du -sh "$D" "$SRC/build-cuda-pack/dist.tar.xz"
