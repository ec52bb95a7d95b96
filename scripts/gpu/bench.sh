#!/bin/sh
# On the GPU machine, from the repository root, after pack.sh (TARGETS including bench_decode
# and gantry-mkmodel): generates a synthetic model with gantry-mkmodel on local disk and runs
# the decode benchmark. PRESET (qwen3-8b), TYPE (bf16), BATCH (1,8,32), PROMPT (512), GEN (256).
set -eu
SRC=$(cd "$(dirname "$0")/../.." && pwd)
D=$SRC/build-cuda-dist
export LD_LIBRARY_PATH="$D/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
PRESET=${PRESET:-qwen3-8b} TYPE=${TYPE:-bf16}
M=/tmp/$PRESET.$TYPE.gguf
if [ ! -f "$M" ]; then
  t0=$(date +%s)
  "$D/gantry-mkmodel" --preset "$PRESET" --type "$TYPE" --out "$M" --threads "$(nproc)" | tail -1
  echo "mkmodel: $(( $(date +%s) - t0 )) s"
fi
"$D/bench_decode" --model "$M" --batch "${BATCH:-1,8,32}" --prompt "${PROMPT:-512}" --gen "${GEN:-256}"
