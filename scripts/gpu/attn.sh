#!/bin/sh
# One device call for the attention work (bf16 KV, split decode, flash prefill), run from the
# repository root on the GPU machine: PACK=<dist.tar.xz of scripts/gpu/pack.sh> sh attn.sh.
# Every step's output goes to one file, $OUT/all.txt (the device returns few files); the key lines
# go to stdout. A failing step does not stop the others; each runs under a timeout, and steps
# past BUDGET seconds are skipped. Steps: gantry-mkmodel qwen3-8b bf16 and qwen35-9b Q4_K_M in
# the background; test_cuda_ops + test_cuda_golden; bench_attn; bench_gdn_scan at GDN_PROMPTS
# tokens (the chunked scan's crossover); bench_decode on qwen3-8b bf16 (batch 1,8,32 x prompt
# 2048; batch 1 x 8192) and on qwen35-9b Q4_K_M (batch 1,8 x 512; batch 1 x LONG tokens).
set -u
OUT=${OUT:-/tmp/attn-out}
PACK=${PACK:-build-cuda-pack/dist.tar.xz}
BUDGET=${BUDGET:-280}
LONG=${LONG:-28672}
. "$(dirname "$0")/session_lib.sh"
session_begin "$PACK"
Q3=/tmp/qwen3-8b.bf16.gguf Q35=/tmp/qwen35-9b.Q4_K_M.gguf
session_mkmodel "$Q3" /tmp/mk1.txt --preset qwen3-8b --type bf16 --threads 8
session_mkmodel "$Q35" /tmp/mk2.txt --preset qwen35-9b --type Q4_K_M --keep-output-bf16 --threads 8
step test_cuda_ops 100 "$D/test_cuda_ops"
grep -E "attention|flash m-tiles|vs fp32|attn_qk_prep .*FAIL|FAIL|\[  (PASSED|FAILED)|\[ +(FAILED) +\]|decode graphs" /tmp/step.txt | head -150
step test_cuda_golden 80 "$D/test_cuda_golden"
grep -E "max_rel_err|\[  (PASSED|FAILED)|\[ +(OK|FAILED) +\]" /tmp/step.txt | head -80
step bench_attn 60 "$D/bench_attn" --reps 10 && cat /tmp/step.txt
for P in ${GDN_PROMPTS:-2048 8192}; do
  step gdn_scan_$P 30 "$D/bench_gdn_scan" --prompt "$P" --reps 3 && grep -E "\| prefill|err" /tmp/step.txt
done
if session_wait "$Q3"; then
  step q3_bf16 80 "$D/bench_decode" --model "$Q3" --batch 1,8,32 --prompt 2048 --gen 64 &&
    grep -E "^\|[ 0-9]|^\| attention|^batch|^sum of ops|warm-up" /tmp/step.txt
  step q3_bf16_8k 40 "$D/bench_decode" --model "$Q3" --batch 1 --prompt 8192 --gen 16 &&
    grep -E "^\| [0-9]|^\| attention|warm-up" /tmp/step.txt
else
  echo "== qwen3-8b bf16 not made: $(tail -2 /tmp/mk1.txt)"
fi
if session_wait "$Q35"; then
  step q35_short 40 "$D/bench_decode" --model "$Q35" --batch 1,8 --prompt 512 --gen 64 &&
    grep -E "^\| [0-9]|^\| attention|warm-up" /tmp/step.txt
  step q35_long 70 "$D/bench_decode" --model "$Q35" --batch 1 --prompt "$LONG" --gen 16 &&
    grep -E "^\| [0-9]|^\| attention|^\| gdn|warm-up" /tmp/step.txt
else
  echo "== qwen35-9b Q4_K_M not made: $(tail -2 /tmp/mk2.txt)"
fi
echo "== done in $(($(date +%s) - t0)) s"
