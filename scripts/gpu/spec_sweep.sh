#!/bin/sh
# scripts/gpu/spec_sweep.sh — issue 25's demo35 numbers in one device call: the model-level cost of
# verify and the MTP drafter for several draft counts (bench_verify at KS, batches VB), the per-op
# decode vs verify profile at k 3, then the served stack at every MODES entry (spec_stack.sh).
# Here:   STACK=1 TARGETS="bench_verify bench_spec gantry-engine" scripts/gpu/pack.sh
#         sh scripts/gpu/slim.sh hide stack     (and `restore` after the call)
# Device: sh scripts/gpu/spec_sweep.sh   (carry build-cuda-pack and build-cuda-stack)
# Env: OUT (/tmp/gpu-spec-sweep), BUDGET (560 s), KS ("3 5 7"), VB (1,8), ACCEPT (3), PROFILE (24
# lines; 0: none), STACK (1; 0: no stack runs), and spec_stack.sh's (MODES, WORKLOADS, CONC); TESTS (packed
# GPU test programs run first, e.g. "test_cuda_golden test_cuda_sched_spec": `slim.sh hide spec` keeps their
# fixtures); M9RUN=1: qwen35-9b Q4_K_M --mtp made in the background (MODELDIR, /tmp), then its bench_decode
# (batch 1,8,32) and bench_verify (1,8) at the end.
set -u
OUT=${OUT:-/tmp/gpu-spec-sweep}
BUDGET=${BUDGET:-560}
. "$(dirname "$0")/session_lib.sh"
session_begin build-cuda-pack/dist.tar.xz
tar xJf build-cuda-stack/stack.tar.xz || echo "== stack unpack FAILED"
DEMO=tests/golden/demo35/gantry-demo35-code-22m.Q4_K_M.gguf
M9=${MODELDIR:-/tmp}/qwen35-9b.Q4_K_M.mtp.gguf
[ "${M9RUN:-0}" = 1 ] && [ ! -s "$M9" ] &&
  session_mkmodel "$M9" "$OUT/mk9.txt" --preset qwen35-9b --type Q4_K_M --mtp --keep-output-bf16 --threads 8
for t in ${TESTS:-}; do
  step "$t" 150 "$D/$t"
  grep -E "PASSED|FAILED|ERROR" /tmp/step.txt | head -6
done
for k in ${KS:-3 5 7}; do
  step "verify k$k" 60 "$D/bench_verify" --model "$DEMO" --device cuda --batches "${VB:-1,8}" --k "$k" --accept "${ACCEPT:-3}" --iters 30 --warm 5
  grep -E '^ *[0-9]+ \|' /tmp/step.txt | sed "s/^/k$k /"
done
if [ "${PROFILE:-24}" != 0 ]; then
  step profile 60 "$D/bench_verify" --model "$DEMO" --device cuda --batches "${VB:-1,8}" --k 3 --accept "${ACCEPT:-3}" --profile
  grep -v ' INFO ' /tmp/step.txt | head -$((2 * ${PROFILE:-24} + 12))
fi
[ "${STACK:-1}" = 1 ] && OUT=$OUT/stack bash scripts/gpu/spec_stack.sh
if [ "${M9RUN:-0}" = 1 ] && session_wait "$M9"; then
  step decode9 90 "$D/bench_decode" --model "$M9" --device cuda --batch 1,8,32 --prompt 512 --gen 32
  grep -E "^ *[0-9]+ +\||tok/s|roofline" /tmp/step.txt | head -12
  step verify9 90 "$D/bench_verify" --model "$M9" --device cuda --batches 1,8 --k 3
  grep -E '^ *[0-9]+ \|' /tmp/step.txt
fi
echo "== done in $(($(date +%s) - t0)) s"
