#!/bin/sh
# scripts/gpu/spec.sh — issue 25's cost targets of speculative decoding on one H200, measured with
# tests/bench/bench_verify.c (model level, the serving path: greedy rows sampled on the GPU, the
# decode step from its captured graph; verify steps and the MTP drafter's steps run eagerly):
#   1. qwen35-9b Q4_K_M (+ its MTP block): a plain decode step vs a verify step of 1 + 3 tokens per
#      sequence at batch 1 and 8 (targets: verify / decode <= 1.2x at batch 1, <= 1.3x at batch 8),
#      and the MTP drafter's time per step;
#   2. qwen35-27b Q4_K_M at batch 1 with an acceptance length of 2.5 (tokens per verify step; the
#      random weights never accept, so it is put in, not measured): the decode rate it gives,
#      2.5 * t_decode / (t_verify + t_mtp) (target >= 1.8x), and the same measured end to end
#      through the scheduler (bench_spec --mode mtp --force-accept 2.5: verify steps forced to
#      keep 2.5 tokens on average; the outputs differ from plain decoding by design).
# Here (builds nothing on the device):
#   TARGETS="bench_verify bench_spec gantry-mkmodel" scripts/gpu/pack.sh
# then on the GPU machine, from the repository root, with build-cuda-pack carried:
#   sh scripts/gpu/spec.sh
# Models are made with gantry-mkmodel --mtp into $MODELDIR (default /tmp; kept for later calls).
# CTX (default 512), K (3), ACCEPT (2.5), ITERS (30). Logs and the table: $OUT (default /tmp/gpu-spec).
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
cd "$SRC" || exit 1
D=$SRC/build-cuda-dist
[ -x "$D/bench_verify" ] || tar xJf build-cuda-pack/dist.tar.xz || { echo "== unpack FAILED"; exit 1; }
OUT=${OUT:-/tmp/gpu-spec} MODELDIR=${MODELDIR:-/tmp}
CTX=${CTX:-512} K=${K:-3} ACCEPT=${ACCEPT:-2.5} ITERS=${ITERS:-30}
mkdir -p "$OUT" "$MODELDIR"
export LD_LIBRARY_PATH="$D/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
echo "commit $(cat "$D/COMMIT" 2>/dev/null || echo unknown)" | tee "$OUT/table.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$OUT/table.txt"

mk() { # preset -> $MODELDIR/<preset>.Q4_K_M.mtp.gguf
  m=$MODELDIR/$1.Q4_K_M.mtp.gguf
  [ -s "$m" ] && return 0
  s=$(date +%s)
  if timeout 420 "$D/gantry-mkmodel" --preset "$1" --type Q4_K_M --mtp --threads 8 --out "$m.tmp" \
      >"$OUT/mkmodel.$1.txt" 2>&1; then
    mv "$m.tmp" "$m"
    echo "== mkmodel $1: $(($(date +%s) - s)) s"
  else
    echo "== mkmodel $1 FAILED ($OUT/mkmodel.$1.txt)"
  fi
}
mk qwen35-9b &
mk qwen35-27b &
wait

bench() { # preset batches
  m=$MODELDIR/$1.Q4_K_M.mtp.gguf
  [ -s "$m" ] || { echo "$1: no model" | tee -a "$OUT/table.txt"; return; }
  echo "#### $1 Q4_K_M --mtp: bench_verify --batches $2 --k $K --ctx $CTX --accept $ACCEPT" | tee -a "$OUT/table.txt"
  timeout 240 "$D/bench_verify" --model "$m" --device cuda --batches "$2" --k "$K" --ctx "$CTX" --accept "$ACCEPT" \
    --iters "$ITERS" --warm 5 >"$OUT/bench.$1.txt" 2>&1
  echo "rc=$?" >>"$OUT/bench.$1.txt"
  grep -v ' INFO ' "$OUT/bench.$1.txt" | tee -a "$OUT/table.txt"
}
bench qwen35-9b 1,8
bench qwen35-27b 1
m27=$MODELDIR/qwen35-27b.Q4_K_M.mtp.gguf
if [ -s "$m27" ] && [ -x "$D/bench_spec" ]; then
  echo "#### qwen35-27b Q4_K_M --mtp: bench_spec --mode mtp --force-accept $ACCEPT --batch 1 --gen 128 --k $K" |
    tee -a "$OUT/table.txt"
  timeout 240 "$D/bench_spec" --model "$m27" --device cuda --mode mtp --force-accept "$ACCEPT" --batch 1 --gen 128 \
    --k "$K" >"$OUT/bench_spec.27b.txt" 2>&1
  echo "rc=$?" >>"$OUT/bench_spec.27b.txt"
  grep -E '^\||speed-up|rc=' "$OUT/bench_spec.27b.txt" | tee -a "$OUT/table.txt"
fi
echo "targets: ver/dec <= 1.2 (batch 1), <= 1.3 (batch 8) on qwen35-9b; speedup >= 1.8x on qwen35-27b at batch 1" |
  tee -a "$OUT/table.txt"
