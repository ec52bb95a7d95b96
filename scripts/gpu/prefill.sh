#!/bin/bash
# On the GPU machine, from the repository root: one device call for the prefill work (issues 12
# item 2, 17 item 1). Unpacks $CARRY/dist.tar.xz (scripts/gpu/pack.sh with TARGETS="test_cuda_ops
# test_cuda_golden bench_decode gantry-mkmodel"), makes qwen3-8b Q4_K_M with gantry-mkmodel in the
# background, runs test_cuda_ops (test_mmq: exact prefill; test_prefill_fast: the dequantize +
# cuBLAS product) and test_cuda_golden (exact, fast with x in 2 and in 1 parts) side by side
# meanwhile, then bench_decode
# (--prompt $PROMPT: one-step prefills = the chunk sizes --max-batch-tokens allows, each with
# its per-op profile) for exact / fast x 2 / 1 x parts, and prints one table. Every step has its
# own timeout and logs under $OUT (at most 8 files); a failing step does not stop the others.
# Env: CARRY (default devcarry/pf), PROMPT (default 512,1024,2048,4096,8192), DEADLINE (seconds
# after start past which no bench starts; default 270).
set -u
C=${CARRY:-devcarry/pf}
OUT=${OUT:-/tmp/pf-out}
PROMPT=${PROMPT:-512,1024,2048,4096,8192}
DEADLINE=${DEADLINE:-270}
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo $(($(date +%s) - t0)); }
. "$(dirname "$0")/session_lib.sh"
session_unpack "$C/dist.tar.xz"
echo "== unpacked at $(el) s"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
M=${MODEL:-/tmp/qwen3-8b.Q4_K_M.gguf}
if [ ! -s "$M" ]; then
  (timeout 200 "$D/gantry-mkmodel" --preset qwen3-8b --type Q4_K_M --out "$M.tmp" --threads 10 >"$OUT/mkmodel.txt" 2>&1 &&
    mv "$M.tmp" "$M"; echo "mkmodel rc=$? at $(el) s" >>"$OUT/mkmodel.txt") &
fi
T=$OUT/tests.txt
# the tests run side by side (correctness only; nothing is timed while they run)
timeout 100 "$D/test_cuda_ops" >"$OUT/test_cuda_ops.log" 2>&1 &
pid_ops=$!
pid_golden=
for cfg in exact:2 fast:2 fast:1; do
  GANTRY_PREFILL_PRECISION=${cfg%%:*} GANTRY_PREFILL_XPARTS=${cfg#*:} timeout 100 "$D/test_cuda_golden" \
    >"$OUT/golden.${cfg%%:*}.${cfg#*:}.log" 2>&1 &
  pid_golden="$pid_golden $!"
done
wait $pid_ops
r=$?
{
  echo "== test_cuda_ops rc=$r (at $(el) s)"
  grep -E "fast |  ffn_swiglu|  matmul_multi|mmq .* rows (65|70|132|138|200|263) |FAIL|\[  (PASSED|FAILED)|\[ +(OK|FAILED) +\]" \
    "$OUT/test_cuda_ops.log" | tail -400
} >"$T" 2>&1
while [ ! -s "$M" ] && [ "$(el)" -lt 170 ] && ! grep -qs "mkmodel rc" "$OUT/mkmodel.txt"; do sleep 1; done
for p in $pid_golden; do wait "$p"; echo "golden pid $p rc=$?" >>"$T"; done # each ends within its timeout
for cfg in exact:2 fast:2 fast:1; do
  f=$OUT/golden.${cfg%%:*}.${cfg#*:}.log
  { echo "== test_cuda_golden precision ${cfg%%:*} xparts ${cfg#*:} (at $(el) s)"
    grep -E "err|FAIL|greedy|top-1|\[  (PASSED|FAILED)|\[ +(OK|FAILED) +\]" "$f" | tail -150; } >>"$T" 2>&1
  rm -f "$f" # at most 8 files come back: its lines are in tests.txt
done
grep -E "^== |PASSED|FAILED" "$T"
echo "== model: $(ls -la "$M" 2>&1) at $(el) s"; tail -2 "$OUT/mkmodel.txt"
for cfg in exact:2 fast:1 fast:2 exact:1; do
  p=${cfg%%:*} xp=${cfg#*:}
  if [ "$(el)" -ge "$DEADLINE" ]; then echo "== skip $cfg: past ${DEADLINE} s"; continue; fi
  echo "== bench_decode precision $p xparts $xp (at $(el) s)"
  GANTRY_PREFILL_XPARTS=$xp timeout 75 "$D/bench_decode" --model "$M" --batch 1 --gen 8 --prompt "$PROMPT" \
    --prefill-precision "$p" >"$OUT/bench.$p.$xp.txt" 2>&1
  echo "rc=$? at $(el) s"
  grep -E "^\| [0-9]+ \| [0-9.]+ \| [0-9]+ \|$|^prefill of|^by kind" "$OUT/bench.$p.$xp.txt"
done
echo "== table: prefill tok/s per chunk (one-step prefill of P tokens), qwen3-8b Q4_K_M"
for f in "$OUT"/bench.*.*.txt; do
  [ -s "$f" ] || continue
  printf '%s: ' "$(basename "$f" .txt)"
  grep -E "^\| [0-9]+ \| [0-9.]+ \| [0-9]+ \|$" "$f" | awk -F'|' '{printf "%s=%s tok/s (%s ms)  ", $2+0, $4+0, $3+0}'
  echo
done
echo "== done at $(el) s"
