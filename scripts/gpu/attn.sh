#!/bin/sh
# One device call for the attention work (bf16 KV, split decode, flash prefill), run from the
# repository root on the GPU machine: PACK=<dist.tar.xz of scripts/gpu/pack.sh> sh attn.sh.
# Steps (each logged under $OUT, a failing step does not stop the others, each under a timeout,
# steps past BUDGET seconds are skipped): gantry-mkmodel qwen3-8b bf16 in the background;
# test_cuda_ops + test_cuda_golden; bench_attn; bench_gdn_scan at GDN_PROMPTS tokens (the chunked
# scan's crossover); bench_decode on the model at batch 1,8,32 x
# prompt 2048 (bf16 KV), batch 32 with --kv-dtype fp32 (the old path), and a long prompt
# (LONG tokens, batch 1) for prefill tok/s.
set -u
SRC=$(pwd)
OUT=${OUT:-/tmp/attn-out}
PACK=${PACK:-build-cuda-pack/dist.tar.xz}
BUDGET=${BUDGET:-280}
LONG=${LONG:-8192}
mkdir -p "$OUT"
t0=$(date +%s)
left() { echo $((BUDGET - ($(date +%s) - t0))); }
[ -x build-cuda-dist/bench_decode ] || tar xJf "$PACK" || echo "== unpack FAILED"
D=$SRC/build-cuda-dist
export LD_LIBRARY_PATH="$D/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export GANTRY_GOLDEN="$SRC/tests/golden" GANTRY_SRC="$SRC" GANTRY_BIN="$D"
M=/tmp/qwen3-8b.bf16.gguf
( timeout 200 "$D/gantry-mkmodel" --preset qwen3-8b --type bf16 --out "$M.tmp" --threads 12 >"$OUT/mkmodel.txt" 2>&1 &&
  mv "$M.tmp" "$M" ) &
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader

step() { # name timeout command...
  name=$1 to=$2
  shift 2
  l=$(left)
  if [ "$l" -lt 10 ]; then echo "== $name SKIPPED (budget)"; return; fi
  [ "$to" -gt "$l" ] && to=$l
  s=$(date +%s)
  timeout "$to" "$@" >"$OUT/$name.txt" 2>&1
  echo "== $name rc=$? ($(($(date +%s) - s)) s, log $name.txt)"
}
step test_cuda_ops 90 "$D/test_cuda_ops"
grep -E "attention|attn_qk_prep|vs fp32|FAIL|\[  (PASSED|FAILED)|\[ +(OK|FAILED) +\]|decode graphs" "$OUT/test_cuda_ops.txt" | head -90
step test_cuda_golden 60 "$D/test_cuda_golden"
grep -E "FAIL|err|\[  (PASSED|FAILED)|\[ +(OK|FAILED) +\]" "$OUT/test_cuda_golden.txt" | tail -30
step bench_attn 60 "$D/bench_attn" --reps 10
cat "$OUT/bench_attn.txt"
for P in ${GDN_PROMPTS:-128 1024 4096}; do
  [ -x "$D/bench_gdn_scan" ] && step gdn_scan_$P 25 "$D/bench_gdn_scan" --prompt "$P" --reps 5 &&
    grep -E "prefill|error" "$OUT/gdn_scan_$P.txt" | sed "s/^/prompt $P: /"
done
while [ ! -s "$M" ] && [ "$(left)" -gt 20 ] && kill -0 $! 2>/dev/null; do sleep 1; done
if [ -s "$M" ]; then
  step bench_bf16 90 "$D/bench_decode" --model "$M" --batch 1,8,32 --prompt 2048 --gen 64
  grep -vE "^ +[a-z_]" "$OUT/bench_bf16.txt" | head -60
  step bench_fp32kv 45 "$D/bench_decode" --model "$M" --batch 32 --prompt 2048 --gen 64 --kv-dtype fp32
  grep -E "^\| [0-9]|attention|sum of ops" "$OUT/bench_fp32kv.txt" | head
  step bench_long 45 "$D/bench_decode" --model "$M" --batch 1 --prompt "$LONG" --gen 32
  grep -E "^\| [0-9]|attention|prefill|sum of ops" "$OUT/bench_long.txt" | head
else
  echo "== model not made: $(tail -2 "$OUT/mkmodel.txt")"
fi
echo "== done in $(($(date +%s) - t0)) s"
