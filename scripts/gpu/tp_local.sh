#!/bin/bash
# scripts/gpu/tp_local.sh — issue 28 on ONE GPU in one device call: sharded CUDA kernels checked on
# ranks that share the GPU (the device-local communicator), and the TP2 / TP4 prediction.
# On the GPU machine, from the repository root, after (here)
#   TARGETS="test_comm_local_gpu test_cuda_ops test_cuda_tp bench_decode bench_comm gantry-mkmodel" scripts/gpu/pack.sh
# with build-cuda-pack carried along; builds nothing. Steps (logs in OUT, default /tmp/gpu-tp-local):
#   1. gantry-mkmodel in the background (all cores): production-width Q4_K_M stacks with a small
#      vocabulary for the shape checks (qwen3-8b 2 layers, qwen35-9b / qwen35-27b 4 layers: 3 GDN
#      + 1 attention; --vocab 8192), then the timing files (the real vocabulary; qwen3-8b 4 layers,
#      qwen35 8 layers), kept in MODELDIR (default /tmp/tp-local) for a later call;
#   2. bench_comm --tp 1: NCCL's own one-rank all-reduce figure (in-graph median per size);
#   3. test_comm_local_gpu (the communicator alone: exact sums eager and replayed, abort, timeout),
#      test_cuda_ops test_tp_shapes (every product and head-count op of one rank of the three models at
#      TP 2 and 4 against the CPU, within the op bounds), then test_cuda_tp with GANTRY_TP_SHAPE_MODELS = the shape files: TP 2 / 4 on one GPU against TP 1
#      (tiny models, the demo, the production shapes; fp32 activations: logits within 1e-2, greedy
#      and device-sampled greedy identical, graphs replayed), the NCCL one-rank cases;
#   4. bench_decode --solo n (rank 0 of n alone, all-reduce a no-op) at n = 1, 2, 4 on the first K1
#      and K2 layers of each timing file (GANTRY_MODEL_LAYERS), batch 1 and 8 (BATCH);
#   5. scripts/gpu/tp_predict.py: the prediction table (engine/TP.md "The TP4 prediction").
#   MEMCHECK=1 adds compute-sanitizer memcheck of the TP 2 / 4 qwen3-tiny case (eager steps, as
#   scripts/gpu/tp_memcheck.sh runs it).
# Env: DIST, OUT, MODELDIR, BATCH (1,8), PROMPT (512), GEN (64), CUSTOM_US (5), PRESETS (the three),
# BENCH=0 / TESTS=0 skip 4-5 / 3. Prints one short table at the end. Exit 1 when a step failed.
# Expected wall time on one H200: ~4-5 min (mkmodel ~2.5 min of it, overlapped with the GPU steps).
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
cd "$SRC" || exit 1
D=${DIST:-$SRC/build-cuda-dist}
[ -z "${DIST:-}" ] && [ -f build-cuda-pack/dist.tar.xz ] && [ ! -x "$D/test_cuda_tp" ] && tar xJf build-cuda-pack/dist.tar.xz
OUT=${OUT:-/tmp/gpu-tp-local}
MODELDIR=${MODELDIR:-/tmp/tp-local}
mkdir -p "$OUT" "$MODELDIR"
export LD_LIBRARY_PATH="$D/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export GANTRY_GOLDEN="$SRC/tests/golden" NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
export CUDA_DEVICE_MAX_CONNECTIONS=32 # each rank's stream its own hardware queue (engine/TP.md "Ranks sharing one GPU")
. "$SRC/scripts/gpu/nccl_lib.sh"
BATCH=${BATCH:-1,8} PROMPT=${PROMPT:-512} GEN=${GEN:-64}
PRESETS=${PRESETS:-qwen3-8b qwen35-9b qwen35-27b}
COMMIT=$(cat "$D/COMMIT" 2>/dev/null || echo "commit unknown")
NP=$(nproc)
rc=0
t_start=$(date +%s)
summary=$OUT/summary.txt
: >"$summary"
note() { echo "$*"; echo "$*" >>"$summary"; }
echo "== tp_local.sh: $COMMIT; $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)"

# preset -> "full_layers n_embd K1 K2 shape_layers"
shape_of() {
  case "$1" in
    qwen3-8b) echo "36 4096 2 4 2" ;;
    qwen35-9b) echo "32 4096 4 8 4" ;;
    qwen35-27b) echo "64 5120 4 8 4" ;;
    *) return 1 ;;
  esac
}
mk() { # out preset layers [vocab]
  local out=$1 preset=$2 layers=$3 vocab=${4:-}
  [ -s "$out" ] && return 0
  if timeout 400 "$D/gantry-mkmodel" --preset "$preset" --type Q4_K_M --layers "$layers" ${vocab:+--vocab "$vocab"} \
    --out "$out.tmp" --threads "$NP" >"$out.log" 2>&1; then
    mv "$out.tmp" "$out"
  else
    rm -f "$out.tmp"
    echo failed >"$out.failed"
  fi
}
wait_file() { while [ ! -s "$1" ] && [ ! -e "$1.failed" ]; do sleep 1; done; [ -s "$1" ]; }

for p in $PRESETS; do shape_of "$p" >/dev/null || { echo "tp_local.sh: unknown preset $p (qwen3-8b qwen35-9b qwen35-27b)"; exit 2; }; done

# 1. models, one at a time with every core, shapes first
SHAPES=
for p in $PRESETS; do
  read -r L E K1 K2 SL <<<"$(shape_of "$p")"
  SHAPES="$SHAPES $MODELDIR/$p.L$SL.v8192.Q4_K_M.gguf"
done
rm -f "$MODELDIR"/*.failed
(
  for p in $PRESETS; do read -r L E K1 K2 SL <<<"$(shape_of "$p")"; mk "$MODELDIR/$p.L$SL.v8192.Q4_K_M.gguf" "$p" "$SL" 8192; done
  for p in $PRESETS; do read -r L E K1 K2 SL <<<"$(shape_of "$p")"; mk "$MODELDIR/$p.L$K2.Q4_K_M.gguf" "$p" "$K2"; done
) &
mkpid=$!

# 2. NCCL's one-rank figure
timeout 120 "$D/bench_comm" --tp 1 --min 4096 --max 1048576 --methods plain --dtypes f32 --iters 200 >"$OUT/bench_comm.txt" 2>&1
r=$?
note "bench_comm --tp 1 rc=$r: $(awk -F'|' '$2+0 == 1 && $5+0 == 32768 {gsub(/ /, "", $10); print "32 KB one-rank NCCL in graph " $10 " us"}' "$OUT/bench_comm.txt")"
[ $r -eq 0 ] || [ $r -eq 77 ] || rc=1 # 77: no libnccl (the prediction then has the custom latency only)

# 3. the GPU tests
if [ "${TESTS:-1}" = 1 ]; then
  timeout 120 "$D/test_comm_local_gpu" >"$OUT/test_comm_local_gpu.txt" 2>&1
  r=$?
  note "test_comm_local_gpu rc=$r (log $OUT/test_comm_local_gpu.txt)"
  grep -E "ranks,|timeout:|\[  (PASSED|FAILED)|\[ +(FAILED|SKIPPED) +\]" "$OUT/test_comm_local_gpu.txt" | tee -a "$summary"
  [ $r -eq 0 ] || rc=1
  t0=$(date +%s)
  GANTRY_TEST_ONLY='test_tp_shapes*' timeout 300 "$D/test_cuda_ops" >"$OUT/test_cuda_ops.tp_shapes.txt" 2>&1
  r=$?
  note "test_cuda_ops test_tp_shapes rc=$r in $(($(date +%s) - t0)) s: $(grep -c ' err [0-9]' "$OUT/test_cuda_ops.tp_shapes.txt") comparisons, $(grep -c '  FAIL$' "$OUT/test_cuda_ops.tp_shapes.txt") over their bound (each has its own: TOL 1e-5, flash prefill 2.5e-3, vs fp32 KV 3.5e-3) (log $OUT/test_cuda_ops.tp_shapes.txt)"
  grep -E "rank 0: heads|refuses|  FAIL$|\[  ERROR   \]|\[  (PASSED|FAILED)" "$OUT/test_cuda_ops.tp_shapes.txt" | tee -a "$summary"
  [ $r -eq 0 ] || rc=1
  for f in $SHAPES; do wait_file "$f" || { note "mkmodel $f FAILED ($f.log)"; rc=1; }; done
  t0=$(date +%s)
  shape_list="$(for f in $SHAPES; do [ -s "$f" ] && printf '%s ' "$f"; done)"
  # a device wait of the local all-reduce gives up after 5 s here (a tiny model's ranks are never
  # that far apart): a deadlock costs seconds, not the call
  GANTRY_TP_SHAPE_MODELS="$shape_list" GANTRY_LOCAL_AR_TIMEOUT_S=5 timeout 420 "$D/test_cuda_tp" >"$OUT/test_cuda_tp.txt" 2>&1
  r=$?
  note "test_cuda_tp rc=$r in $(($(date +%s) - t0)) s (log $OUT/test_cuda_tp.txt)"
  grep -E "on one GPU|one NCCL rank|TP=2 vs|\[  (PASSED|FAILED)|\[ +(FAILED|SKIPPED) +\]|refused|waited more" "$OUT/test_cuda_tp.txt" |
    sed "s|$MODELDIR/||; s|$SRC/tests/golden/||" | tee -a "$summary"
  [ $r -eq 0 ] || rc=1
  if [ $r -ne 0 ] && grep -q "waited more than" "$OUT/test_cuda_tp.txt"; then
    # the graph path timed out: the sharded kernels through the eager path (per-call rendezvous)
    t0=$(date +%s)
    GANTRY_TEST_ONLY="test_local_*" GANTRY_CUDA_GRAPHS=0 GANTRY_TP_SHAPE_MODELS="$shape_list" GANTRY_LOCAL_AR_TIMEOUT_S=5 \
      timeout 300 "$D/test_cuda_tp" >"$OUT/test_cuda_tp.eager.txt" 2>&1
    note "test_cuda_tp GANTRY_CUDA_GRAPHS=0 (eager steps) rc=$? in $(($(date +%s) - t0)) s (log $OUT/test_cuda_tp.eager.txt)"
    grep -E "on one GPU|\[  (PASSED|FAILED)|\[ +FAILED +\]|waited more" "$OUT/test_cuda_tp.eager.txt" |
      sed "s|$MODELDIR/||; s|$SRC/tests/golden/||" | tee -a "$summary"
  fi
  if [ "${MEMCHECK:-0}" = 1 ] && command -v compute-sanitizer >/dev/null; then
    # eager steps: see scripts/gpu/tp_memcheck.sh (the one-call memcheck script)
    GANTRY_CUDA_GRAPHS=0 GANTRY_LOCAL_AR_TIMEOUT_S=120 GANTRY_TEST_ONLY=test_local_qwen3_bf16 timeout 240 compute-sanitizer --tool memcheck \
      --error-exitcode 9 "$D/test_cuda_tp" >"$OUT/memcheck.txt" 2>&1
    note "memcheck TP 2/4 qwen3-tiny rc=$? $(grep -m1 'ERROR SUMMARY' "$OUT/memcheck.txt")"
  fi
fi

# 4. one rank's decode step at TP 1 / 2 / 4 shapes, two depths per file
specs=
if [ "${BENCH:-1}" = 1 ]; then
  for p in $PRESETS; do
    read -r L E K1 K2 SL <<<"$(shape_of "$p")"
    f=$MODELDIR/$p.L$K2.Q4_K_M.gguf
    wait_file "$f" || { note "mkmodel $f FAILED ($f.log)"; rc=1; continue; }
    specs="$specs $p:$L:$E:$K1,$K2"
    for k in $K1 $K2; do
      for n in 1 2 4; do
        log=$OUT/bench.$p.L$k.n$n.txt
        solo=
        [ "$n" -gt 1 ] && solo="--solo $n"
        # shellcheck disable=SC2086
        GANTRY_MODEL_LAYERS=$k timeout 240 "$D/bench_decode" --model "$f" --batch "$BATCH" --prompt "$PROMPT" --gen "$GEN" \
          $solo >"$log" 2>&1
        r=$?
        ms=$(awk -F'|' '(NF == 12 || NF == 13) && $2 ~ /[0-9]/ {gsub(/ /, "", $2); gsub(/ /, "", $4); printf "b%s %s ms  ", $2, $4}' "$log")
        echo "== bench $p first $k layers, rank 0 of $n: rc=$r $ms"
        [ $r -eq 0 ] || { tail -3 "$log"; rc=1; }
      done
    done
  done
  wait $mkpid
  # 5. the prediction
  python3 scripts/gpu/tp_predict.py "$OUT" "${specs# }" --batches "$BATCH" --custom-us "${CUSTOM_US:-5}" \
    --title "TP prediction from one H200 ($COMMIT): bench_decode --batch $BATCH --prompt $PROMPT --gen $GEN --solo n, Q4_K_M (qwen35: BF16 head), GANTRY_MODEL_LAYERS=K1,K2 of each file" \
    >"$OUT/prediction.md" 2>&1 || rc=1
fi
wait $mkpid 2>/dev/null

echo
echo "== summary ($COMMIT, $(($(date +%s) - t_start)) s, logs $OUT)"
cat "$summary"
[ -s "$OUT/prediction.md" ] && cat "$OUT/prediction.md"
echo "== tp_local.sh rc=$rc"
exit $rc
