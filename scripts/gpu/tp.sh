#!/bin/bash
# scripts/gpu/tp.sh — the multi-GPU tensor-parallel run (issue 14; the TP work is issue 13). On the GPU
# machine, from the repository root, after scripts/gpu/pack.sh with
#   TARGETS="bench_comm test_comm_nccl_gpu gantry-engine gantry-mkmodel" (+ "gantry-router gantry"
#   and STACK=1 for the stack part)
# and build-cuda-pack carried along; builds nothing. On a machine with fewer GPUs it runs the TP sizes
# that fit (one GPU: the TP 1 parts only).
#
# Interface driven (issue 13): `gantry-engine eval|generate|bench|serve ... --tp N` (one process, N
# ranks on GPUs 0..N-1, or --devices LIST). --tp is passed only for N > 1, so the TP 1 runs are the
# same command lines as before TP existed.
#
# Parts (PARTS, default "comm check decode stack"):
#   comm    test_comm_nccl_gpu at the largest TP size (a thread per rank: eager, graph-captured and
#           replayed all-reduce, both methods, f32 and bf16), then bench_comm --tp <sizes> (all-reduce
#           latency 4 KB..4 MB, plain vs symmetric memory, eager vs graph, with its sum check).
#   check   per CHECK_MODELS entry and TP size n > 1: `eval` logits of 32 fixed ids (100..999) at TP n against TP 1
#           (scripts/gpu/logits_cmp.py: max row rel err <= TOL, default 2e-2 = the fixtures' GPU
#           tolerance with bf16 activations, and top-1 agreement on rows with a TP 1 margin >= 0.05),
#           and a greedy `generate` of GEN_TOKENS (32) tokens at TP n against TP 1 (printed with the
#           first differing character; informational, the logits check decides). At TP 1 also `eval`
#           with GANTRY_TP_FORCE_GROUP=1 (one rank through the group and NCCL) must give the TP 1
#           logits bit for bit. With one GPU: the TP 1 parts only.
#   decode  per MODELS entry and TP size: `gantry-engine bench --batch 1 --prompt PROMPT (512) --gen
#           GEN (128)`; the batch-1 decode ms/step of each size goes to scripts/gpu/tp_fit.awk, which
#           prints the speed-up against TP 1 and the fit T(n) = a + w/n (a: the fixed per-token
#           cost; targets: qwen3-8b bf16 TP2 >= 1.8x and TP4 >= 3.2x, qwen35-27b Q4_K_M TP4 >= 2.5x,
#           a <= 0.3 ms). The bench's "all-reduce per decode step" table is shown for TP > 1.
#   stack   scripts/gpu/stack.sh on STACK_MODEL (qwen3-8b:Q4_K_M) at each STACK_TP size (default: the
#           largest TP size) with ENGINE_ARGS="--tp n" (CONTEXTS, CONC, ... pass through to stack.sh).
# Models: preset:type as in suite.sh (gantry-mkmodel into MODELDIR, kept for later calls and shared
# with suite.sh) or a .gguf path. CHECK_MODELS default "tests/golden/qwen3-tiny.bf16.gguf
# tests/golden/qwen3-tiny.Q8_0.gguf tests/golden/qwen35-tiny.bf16.gguf qwen3-8b:bf16
# qwen35-9b:Q4_K_M" (the tiny Q4_K_M / Q6_K fixtures are refused at TP 2: their 256-wide rows
# would be cut inside a 256-element quantization block); MODELS
# default "qwen3-8b:bf16 qwen35-27b:Q4_K_M".
# The prediction these runs are set against: scripts/gpu/tp_local.sh (one GPU; engine/TP.md "The TP4
# prediction"), qwen3-8b / qwen35-9b / qwen35-27b Q4_K_M at batch 1 and 8: run `decode` with
# MODELS="qwen3-8b:Q4_K_M qwen35-9b:Q4_K_M qwen35-27b:Q4_K_M" BATCH=1,8 GEN=64 for the same numbers
# (PREDICTION=path/to/prediction.md prints its rows beside the measured fit).
# LOCAL=1: every rank on GPU 0 (--devices 0,0,...: the device-local communicator), so check /
# decode run the CLI's TP path on a one-GPU machine (decode times then share one GPU: not TP speed).
# Env: TP ("1 2 4"), DIST (build-cuda-dist), OUT (/tmp/gpu-tp), MODELDIR (/tmp), DEVICE (cuda; cpu
# runs check/decode/stack with CPU ranks on a local build: DIST=build DEVICE=cpu), CMD_TIMEOUT (300 s
# per engine command), TOL, GEN_TOKENS, PROMPT, GEN, BENCH_COMM_ARGS (extra bench_comm options).
# NCCL: the pack does not carry libnccl (200+ MB); this script points GANTRY_NCCL_LIB at the machine's
# own libnccl.so.2 (loader path, /usr/local/cuda, or the nvidia-nccl wheel of its python3) unless set.
# NVLS stays off (NCCL_NVLS_ENABLE=0 unless already set; the library sets it too).
# A device call allows 600 s: run the parts apart, e.g. PARTS=comm, PARTS="check" CHECK_MODELS=qwen3-8b:bf16,
# PARTS=decode MODELS=qwen3-8b:bf16. Exit 1 when a part failed.
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
cd "$SRC" || exit 1
D=${DIST:-$SRC/build-cuda-dist}
[ -z "${DIST:-}" ] && [ -f build-cuda-pack/dist.tar.xz ] && [ ! -x "$D/gantry-engine" ] && [ ! -x "$D/bench_comm" ] &&
  tar xJf build-cuda-pack/dist.tar.xz
OUT=${OUT:-/tmp/gpu-tp}
MODELDIR=${MODELDIR:-/tmp}
DEVICE=${DEVICE:-cuda}
PARTS=${PARTS:-comm check decode stack}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$D/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
CT=${CMD_TIMEOUT:-300}
rc=0

# libnccl.so.2 for comm_nccl's dlopen: the loader's path first, else a wheel of the machine's python3
. "$(dirname "$0")/nccl_lib.sh"
echo "== tp.sh: $(cat "$D/COMMIT" 2>/dev/null || echo "commit unknown"); libnccl: ${GANTRY_NCCL_LIB:-loader path}; NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"

# TP sizes that fit the visible GPUs (CPU ranks are threads: every size fits)
if [ "$DEVICE" = cpu ] || [ "${LOCAL:-0}" = 1 ]; then
  ngpu=64
elif [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  ngpu=$(echo "$CUDA_VISIBLE_DEVICES" | tr , '\n' | grep -c .)
else
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
fi
sizes=
for n in ${TP:-1 2 4}; do [ "$n" -le "$ngpu" ] && sizes="$sizes $n"; done
sizes=${sizes# }
[ -n "$sizes" ] || { echo "== tp.sh: no TP size of '${TP:-1 2 4}' fits $ngpu visible GPU(s)"; exit 1; }
largest=${sizes##* }
echo "== $ngpu GPU(s) visible ($DEVICE): TP sizes $sizes"
tp_arg() { # --tp n (n > 1), and with LOCAL=1 every rank on GPU 0
  [ "$1" -gt 1 ] || return 0
  if [ "${LOCAL:-0}" = 1 ]; then echo "--tp $1 --devices $(seq -s, 1 "$1" | sed 's/[0-9]\+/0/g')"; else echo "--tp $1"; fi
}
has_part() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }

# preset:type -> a .gguf path in MODELDIR (generated once, same names as suite.sh); a .gguf is kept
model_path() {
  case "$1" in *.gguf) echo "$1"; return 0 ;; esac
  local preset=${1%%:*} type=${1#*:} keep=
  local m=$MODELDIR/$preset.$type.gguf
  if [ ! -s "$m" ]; then
    case "$preset:$type" in qwen35*:Q4_K_M) keep=--keep-output-bf16 ;; esac
    # shellcheck disable=SC2086
    if ! timeout "${MKMODEL_TIMEOUT:-300}" "$D/gantry-mkmodel" --preset "$preset" --type "$type" $keep --out "$m.tmp" \
      --threads "$(nproc)" >"$OUT/mkmodel.$preset.$type.txt" 2>&1; then
      rm -f "$m.tmp"
      return 1
    fi
    mv "$m.tmp" "$m"
  fi
  echo "$m"
}

if has_part comm; then
  if [ "$DEVICE" = cpu ]; then
    echo "== comm: skipped (DEVICE=cpu)"
  else
    echo "== comm: test_comm_nccl_gpu at TP $largest"
    GANTRY_TEST_TP=$largest timeout 120 "$D/test_comm_nccl_gpu" >"$OUT/test_comm_nccl_gpu.txt" 2>&1
    r=$?
    cat "$OUT/test_comm_nccl_gpu.txt"
    echo "== test_comm_nccl_gpu rc=$r"
    [ $r -eq 0 ] || rc=1
    # shellcheck disable=SC2086
    timeout "${CT}" "$D/bench_comm" --tp "$(echo "$sizes" | tr ' ' ,)" ${BENCH_COMM_ARGS:-} >"$OUT/bench_comm.txt" 2>&1
    r=$?
    cat "$OUT/bench_comm.txt"
    echo "== bench_comm rc=$r (log $OUT/bench_comm.txt)"
    [ $r -eq 0 ] || rc=1
  fi
fi

if has_part check; then
  ids=$(seq 0 31 | awk '{printf "%s%d", (NR > 1 ? "," : ""), 100 + ($1 * 7919) % 900}')
  for spec in ${CHECK_MODELS:-tests/golden/qwen3-tiny.bf16.gguf tests/golden/qwen3-tiny.Q8_0.gguf tests/golden/qwen35-tiny.bf16.gguf qwen3-8b:bf16 qwen35-9b:Q4_K_M}; do
    m=$(model_path "$spec") || { echo "== check $spec: gantry-mkmodel FAILED"; rc=1; continue; }
    tag=$(basename "$m" .gguf)
    for n in $sizes; do
      # shellcheck disable=SC2046
      timeout "$CT" "$D/gantry-engine" eval --model "$m" --device "$DEVICE" $(tp_arg "$n") --ids "$ids" \
        --logits-out "$OUT/$tag.tp$n.f32" >"$OUT/eval.$tag.tp$n.txt" 2>&1
      r=$?
      # shellcheck disable=SC2046
      timeout "$CT" "$D/gantry-engine" generate --model "$m" --device "$DEVICE" $(tp_arg "$n") --ignore-eos \
        --max-tokens "${GEN_TOKENS:-32}" --prompt "The tensor-parallel engine splits every layer" \
        >"$OUT/gen.$tag.tp$n.txt" 2>"$OUT/gen.$tag.tp$n.err"
      g=$?
      if [ $r -ne 0 ] || [ $g -ne 0 ]; then
        echo "== check $tag TP $n: eval rc=$r generate rc=$g FAILED"
        tail -n 3 "$OUT/eval.$tag.tp$n.txt" "$OUT/gen.$tag.tp$n.err"
        rc=1
        continue
      fi
      if [ "$n" -eq 1 ]; then
        echo "== check $tag TP 1: eval + generate ok ($(tail -1 "$OUT/gen.$tag.tp1.err"))"
        # one rank through the group and its communicator (on CUDA: NCCL) = TP 1, bit for bit
        GANTRY_TP_FORCE_GROUP=1 timeout "$CT" "$D/gantry-engine" eval --model "$m" --device "$DEVICE" --ids "$ids" \
          --logits-out "$OUT/$tag.group1.f32" >"$OUT/eval.$tag.group1.txt" 2>&1
        r=$?
        if [ $r -ne 0 ]; then
          echo "== check $tag one-rank group: eval rc=$r FAILED"
          tail -n 3 "$OUT/eval.$tag.group1.txt"
          rc=1
        elif cmp -s "$OUT/$tag.tp1.f32" "$OUT/$tag.group1.f32"; then
          via=$(grep -o 'NCCL [0-9.]*' "$OUT/eval.$tag.group1.txt" | head -1)
          echo "== check $tag one-rank group${via:+ over $via}: logits identical to TP 1"
        else
          echo "== check $tag one-rank group: logits differ from TP 1 FAILED"
          rc=1
        fi
        continue
      fi
      [ -s "$OUT/$tag.tp1.f32" ] || { echo "== check $tag TP $n: no TP 1 reference"; rc=1; continue; }
      line=$(python3 scripts/gpu/logits_cmp.py "$OUT/$tag.tp1.f32" "$OUT/$tag.tp$n.f32" 32 "${TOL:-2e-2}" 2>&1)
      r=$?
      echo "== check $tag TP $n vs TP 1 logits: $line"
      [ $r -eq 0 ] || rc=1
      if cmp -s "$OUT/gen.$tag.tp1.txt" "$OUT/gen.$tag.tp$n.txt"; then
        echo "== check $tag TP $n vs TP 1 greedy text: identical"
      else
        echo "== check $tag TP $n vs TP 1 greedy text: differs at byte $(cmp "$OUT/gen.$tag.tp1.txt" "$OUT/gen.$tag.tp$n.txt" |
          awk '{print $5}' | tr -d ,) (informational)"
      fi
    done
  done
fi

if has_part decode; then
  for spec in ${MODELS:-qwen3-8b:bf16 qwen35-27b:Q4_K_M}; do
    m=$(model_path "$spec") || { echo "== decode $spec: gantry-mkmodel FAILED"; rc=1; continue; }
    tag=$(basename "$m" .gguf)
    batches=$(echo "${BATCH:-1}" | tr , ' ')
    for b in $batches; do : >"$OUT/fit.$tag.b$b.txt"; done
    for n in $sizes; do
      log=$OUT/bench.$tag.tp$n.txt
      # shellcheck disable=SC2046
      timeout "$CT" "$D/gantry-engine" bench --model "$m" --device "$DEVICE" $(tp_arg "$n") --batch "${BATCH:-1}" \
        --prompt "${PROMPT:-512}" --gen "${GEN:-128}" >"$log" 2>&1
      r=$?
      # the engine's all-reduce time per decode step (gantry-engine bench with --tp > 1)
      awk '/^all-reduce per decode step/ {on = 1} on && /^$/ {exit} on {print}' "$log"
      for b in $batches; do
        # the batch-b row of engine/models/bench.h's table: | batch | prefill tok/s | decode ms/step | ...
        ms=$(awk -F'|' -v b="$b" '(NF == 12 || NF == 13) && $2 ~ /[0-9]/ && $2 + 0 == b && $4 ~ /[0-9]/ {gsub(/ /, "", $4); print $4; exit}' "$log")
        echo "== decode $tag TP $n: rc=$r, batch-$b decode ${ms:-?} ms/step (log $log)"
        if [ $r -ne 0 ] || [ -z "$ms" ]; then
          tail -n 5 "$log"
          rc=1
          continue
        fi
        echo "$n $ms" >>"$OUT/fit.$tag.b$b.txt"
      done
    done
    for b in $batches; do
      echo "== decode $tag batch $b: T(n) per TP size"
      awk -f scripts/gpu/tp_fit.awk "$OUT/fit.$tag.b$b.txt" >"$OUT/fit.$tag.b$b.out" || rc=1
      cat "$OUT/fit.$tag.b$b.out"
      a=$(sed -n 's/^fit T(n) = a + w\/n: a = \([-0-9.]*\) ms.*/\1/p' "$OUT/fit.$tag.b$b.out")
      [ -n "$a" ] && echo "== decode $tag batch $b: fixed per-step cost a = $a ms (target <= 0.3 ms: $(awk -v a="$a" \
        'BEGIN {print (a < 0 ? "not meaningful: negative, noisy times" : a <= 0.3 ? "met" : "NOT met")}'))"
      if [ -n "${PREDICTION:-}" ] && [ -f "$PREDICTION" ]; then # the one-GPU prediction of this model and batch
        echo "   predicted (tp_local.sh):"
        grep -E "^\| ${tag%%.*} \| $b \|" "$PREDICTION" | sed 's/^/   /'
      fi
    done
  done
fi

if has_part stack; then
  spec=${STACK_MODEL:-qwen3-8b:Q4_K_M}
  if m=$(model_path "$spec"); then
    name=${spec%%:*}
    case "$spec" in *.gguf) name=$(basename "$m" .gguf) ;; esac
    for n in ${STACK_TP:-$largest}; do
      echo "== stack $spec TP $n"
      ENGINE_ARGS="${ENGINE_ARGS:-} $(tp_arg "$n")" DIST=$D DEVICE=$DEVICE OUT=$OUT/stack.tp$n \
        bash scripts/gpu/stack.sh "$m" "$name" || rc=1
    done
  else
    echo "== stack $spec: gantry-mkmodel FAILED"
    rc=1
  fi
fi
echo "== tp.sh rc=$rc (logs $OUT)"
exit $rc
