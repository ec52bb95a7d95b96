#!/bin/sh
# scripts/gpu/spec27.sh — qwen35-27b Q4_K_M (+ MTP, BF16 head) in a warm call after
# scripts/gpu/session_check.sh (which starts its gantry-mkmodel under setsid): issue 25's 27B target
# (bench_verify at batch 1 with an acceptance length of 2.5: speedup = 2.5 t_decode / (t_verify +
# t_mtp); bench_spec --force-accept 2.5 end to end through the scheduler) and issue 24's whole-model
# prefill and decode (bench_decode --batch 1 --prompt 512). Env: OUT (/tmp/gpu-27b), BUDGET (400 s),
# PARTS (default "verify spec decode": which of the three to run).
set -u
OUT=${OUT:-/tmp/gpu-27b}
BUDGET=${BUDGET:-400}
. "$(dirname "$0")/session_lib.sh"
session_begin build-cuda-pack/dist.tar.xz
M27=${MODELDIR:-/tmp}/qwen35-27b.Q4_K_M.mtp.gguf
session_wait "$M27" || { echo "== 27B not made"; tail -3 "${MODELDIR:-/tmp}/mk27.txt"; exit 1; }
tail -1 "${MODELDIR:-/tmp}/mk27.txt"
has() { case " ${PARTS:-verify spec decode} " in *" $1 "*) return 0 ;; esac; return 1; }
if has verify; then
  GANTRY_GPIPE=0 step verify27 120 "$D/bench_verify" --model "$M27" --device cuda --batches 1 --k 3 --ctx 512 --accept 2.5 --iters 20 --warm 3
  grep -v ' INFO ' /tmp/step.txt | tail -5
fi
if has spec; then
  GANTRY_GPIPE=0 GANTRY_LOG_SLOW_STEP_MS=0.0001 step spec27 150 "$D/bench_spec" --model "$M27" --device cuda --mode mtp --force-accept 2.5 --batch 1 --gen 128 --k 3
  grep -E '^\||speed-up|acceptance' /tmp/step.txt | head -8
  phases "27b mtp accept 2.5 b1"
fi
if has decode; then
  for g in 0 auto; do
    if [ "$g" = auto ]; then set -- env -u GANTRY_GPIPE; else set -- env GANTRY_GPIPE=$g; fi
    step "decode27 gpipe=$g" 120 "$@" "$D/bench_decode" --model "$M27" --batch 1 --prompt 512 --gen 32
    grep -E "^\\| [0-9]+ \\|" /tmp/step.txt | sed "s/^/gpipe=$g /"
  done
  cp /tmp/step.txt "$OUT/decode27.txt"
  grep -E '^\| [0-9]+ \||prefill' /tmp/step.txt | head -6
fi
echo "== done in $(($(date +%s) - t0)) s"
