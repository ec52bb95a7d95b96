#!/bin/bash
# Trains the second demo model (Qwen3.5 hybrid + MTP, tools/demo35/) on the GPU machine in ONE call:
# train (TRAIN_S seconds, default 270) -> bf16 GGUF (llama.cpp's converter + the nextn tensors) ->
# Q4_K_M (gantry-quantize) -> fp32 reference logits on the dequantized Q4_K_M weights. Training ends by
# END_S (default 390) seconds after the training script starts, so the call fits ~9 minutes.
# Needs the kit carried in (ignored by git): KIT=.demo35-kit with convert_hf_to_gguf.py, gguf-py/ and a
# CPU build of gantry-quantize (tools/demo35/README.md says how to make it).
# $OUT gets (at most 8 files): train.log, gantry-demo35-code.Q4_K_M.gguf (split into .partN when over
# 16 MB), demo35.tar (manifest.json, demo35.logits.f32, heldout.json, train_stats.json, hf config and map).
set -u
cd "$(dirname "$0")/../.."
KIT=${KIT:-.demo35-kit}
OUT=${OUT:?OUT must be set}
W=${WORK:-/tmp/demo35}
TRAIN_S=${TRAIN_S:-270}
NAME=gantry-demo35-code
LOG=$OUT/train.log
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=true
mkdir -p "$W" "$OUT"
exec > >(tee -a "$LOG") 2>&1
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo ?) $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
for f in "$KIT/convert_hf_to_gguf.py" "$KIT/gguf-py/gguf/__init__.py" "$KIT/gantry-quantize"; do
  [ -e "$f" ] || { echo "FATAL: $f missing (carry $KIT)"; exit 2; }
done
python3 -c 'import torch, transformers, tokenizers, safetensors, yaml; print("python", __import__("sys").version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)' || exit 2
t0=$(date +%s)
stage() { echo "=== $1 ($(( $(date +%s) - t0 ))s)"; }
stage train
END_S=${END_S:-390} python3 tools/demo35/train_demo35.py "$W" tests/golden/demo35/hf "$TRAIN_S" || { echo "FATAL: training failed"; exit 3; }
stage export
python3 tools/demo35/export_demo35.py "$W/hf" "$KIT" "$W/$NAME.bf16.gguf" "$W/gguf_map.json" 2>&1 | tail -n 25
[ -s "$W/$NAME.bf16.gguf" ] || { echo "FATAL: conversion failed"; exit 4; }
stage quantize
"$KIT/gantry-quantize" "$W/$NAME.bf16.gguf" "$W/$NAME.Q4_K_M.gguf" Q4_K_M --threads 16 | tail -n 3
[ -s "$W/$NAME.Q4_K_M.gguf" ] || { echo "FATAL: quantize failed"; exit 5; }
ls -l "$W"/*.gguf
sz=$(stat -c %s "$W/$NAME.Q4_K_M.gguf")
if [ "$sz" -gt 16000000 ]; then split -b 15000000 -d "$W/$NAME.Q4_K_M.gguf" "$OUT/$NAME.Q4_K_M.gguf.part"; else cp "$W/$NAME.Q4_K_M.gguf" "$OUT/"; fi
stage reference
REF_BUDGET_S=$(( 560 - ($(date +%s) - t0) )) python3 tools/demo35/ref_demo35.py "$W" "$KIT" "$W/$NAME.Q4_K_M.gguf" "$W/gguf_map.json" || echo "ERROR: reference failed"
mkdir -p "$W/pack/hf"
cp "$W"/manifest.json "$W"/demo35.logits.f32 "$W"/heldout.json "$W"/train_stats.json "$W"/gguf_map.json "$W/pack/" 2>/dev/null
cp "$W/hf/config.json" "$W/pack/hf/" 2>/dev/null
tar -C "$W/pack" -cf "$OUT/demo35.tar" .
stage done
ls -l "$OUT"
