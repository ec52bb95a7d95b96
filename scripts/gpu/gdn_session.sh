#!/bin/bash
# On the GPU machine: the long-sequence GDN scan session (issue 17). Unpacks the programs that
# scripts/gpu/pack.sh built (TARGETS="test_cuda_ops bench_gdn_scan") from $1/dist.tar.xz and
# runs, each step logged under $OUT with its own timeout, a failing step not stopping the others:
# bench_gdn_scan alone (validation vs the CPU, then per-token vs long kernels at 1 .. 8192
# tokens), then test_cuda_ops (every op vs the CPU backend, test_gdn_long among them) beside
# racecheck + memcheck of bench_gdn_scan's validation. At most about 280 s.
#   OUT=/tmp/out scripts/gpu/gdn_session.sh devcarry/gdn
set -u
PK=$(cd "${1:?usage: gdn_session.sh <folder with dist.tar.xz>}" && pwd)
SRC=${SRC:-$(cd "$(dirname "$0")/../.." && pwd)} # the repo root (pass SRC= when run from a copy)
O=${OUT:-/tmp/out}
mkdir -p "$O"
W=$(mktemp -d)
step() { # step NAME TIMEOUT CMD...: runs CMD in the repo root, log to $O/NAME.log
  local name=$1 to=$2
  shift 2
  echo "== $name ($(date +%T)): $*"
  (cd "$SRC" && timeout "$to" stdbuf -oL -eL "$@") >"$O/$name.log" 2>&1
  local r=$?
  echo "== $name rc=$r"
}
tar -C "$W" -xJf "$PK/dist.tar.xz" || { echo "unpack failed"; exit 1; }
D=$W/build-cuda-dist
cat "$D/COMMIT"
export LD_LIBRARY_PATH="$D/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export GANTRY_GOLDEN="$SRC/tests/golden" GANTRY_SRC="$SRC" GANTRY_BIN="$D"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
step bench 75 "$D/bench_gdn_scan" --prompt 512 --reps 20 --max 8192
grep -E "^check|^\||MISMATCH" "$O/bench.log"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
{
  step racecheck 60 "$CS" --tool racecheck --error-exitcode 9 "$D/bench_gdn_scan" --prompt 40 --max 64 --check 1
  step memcheck 60 "$CS" --tool memcheck --error-exitcode 9 "$D/bench_gdn_scan" --prompt 40 --max 64 --check 1
} >"$O/sanitizers.txt" 2>&1 &
step test_cuda_ops 195 "$D/test_cuda_ops"
grep -E "gdn|FAIL|\[  (PASSED|FAILED)|\[ +(FAILED) +\]" "$O/test_cuda_ops.log" | tail -60
wait
cat "$O/sanitizers.txt"
grep -E "RACECHECK SUMMARY|^check|hazard" "$O/racecheck.log" | head
grep -E "ERROR SUMMARY|^check|Invalid" "$O/memcheck.log" | head
rm -rf "$W"
