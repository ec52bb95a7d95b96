#!/bin/sh
# scripts/gpu/spec_sweep.sh — issue 25's demo35 numbers in one device call: the model-level cost of
# verify and the MTP drafter for several draft counts (bench_verify at KS, batches VB), the per-op
# decode vs verify profile at k 3, then the served stack at every MODES entry (spec_stack.sh).
# Here:   STACK=1 TARGETS="bench_verify bench_spec gantry-engine" scripts/gpu/pack.sh
#         sh scripts/gpu/slim.sh hide stack     (and `restore` after the call)
# Device: sh scripts/gpu/spec_sweep.sh   (carry build-cuda-pack and build-cuda-stack)
# Env: OUT (/tmp/gpu-spec-sweep), BUDGET (560 s), KS ("3 5 7"), VB (1,8), ACCEPT (3), PROFILE (24
# lines; 0: none), STACK (1; 0: no stack runs), and spec_stack.sh's (MODES, WORKLOADS, CONC).
set -u
OUT=${OUT:-/tmp/gpu-spec-sweep}
BUDGET=${BUDGET:-560}
. "$(dirname "$0")/session_lib.sh"
session_begin build-cuda-pack/dist.tar.xz
tar xJf build-cuda-stack/stack.tar.xz || echo "== stack unpack FAILED"
DEMO=tests/golden/demo35/gantry-demo35-code-22m.Q4_K_M.gguf
for k in ${KS:-3 5 7}; do
  step "verify k$k" 60 "$D/bench_verify" --model "$DEMO" --device cuda --batches "${VB:-1,8}" --k "$k" --accept "${ACCEPT:-3}" --iters 30 --warm 5
  grep -E '^ *[0-9]+ \|' /tmp/step.txt | sed "s/^/k$k /"
done
if [ "${PROFILE:-24}" != 0 ]; then
  step profile 60 "$D/bench_verify" --model "$DEMO" --device cuda --batches "${VB:-1,8}" --k 3 --accept "${ACCEPT:-3}" --profile
  grep -v ' INFO ' /tmp/step.txt | head -$((2 * ${PROFILE:-24} + 12))
fi
[ "${STACK:-1}" = 1 ] && OUT=$OUT/stack bash scripts/gpu/spec_stack.sh
echo "== done in $(($(date +%s) - t0)) s"
