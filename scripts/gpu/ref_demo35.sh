#!/bin/bash
# Reference-only rerun for demo35 (tools/demo35/ref_demo35.py): the fp32 reference logits of the training
# code's forward on the Q4_K_M GGUF that scripts/gpu/train_demo35.sh made. Uses that run's /tmp/demo35
# when the machine is still the warm one it ran on; else the GGUF + demo35.tar carried in REF=.demo35-ref.
# Either way the GGUF must have sha256 $SHA (the file that came back). Needs KIT=.demo35-kit (gguf-py).
# $OUT gets ref.log and demo35ref.tar (manifest.json, demo35.logits.f32). Runs in about a minute.
set -u
cd "$(dirname "$0")/../.."
KIT=${KIT:-.demo35-kit}; REF=${REF:-.demo35-ref}; OUT=${OUT:?OUT must be set}
SHA=${SHA:-7f5dbd49ac88f7250b722b3e91df6ab8df84a23526dfdc74b9d48203e4ceca3a}
NAME=gantry-demo35-code.Q4_K_M.gguf
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
exec > >(tee -a "$OUT/ref.log") 2>&1
W=/tmp/demo35
if [ -s "$W/$NAME" ] && [ -s "$W/gguf_map.json" ] && [ -s "$W/hf/config.json" ]; then
  echo "using the training run's $W (warm machine)"
elif [ -s "$REF/$NAME" ] && [ -s "$REF/demo35.tar" ]; then
  W=/tmp/demo35ref; rm -rf "$W"; mkdir -p "$W"; tar -C "$W" -xf "$REF/demo35.tar"; cp "$REF/$NAME" "$W/"
  echo "using the carried $REF"
else
  echo "FATAL: neither /tmp/demo35 (cold machine) nor $REF/$NAME + $REF/demo35.tar"; exit 2
fi
got=$(sha256sum "$W/$NAME" | cut -d' ' -f1)
[ "$got" = "$SHA" ] || { echo "FATAL: $W/$NAME has sha256 $got, want $SHA"; exit 3; }
[ -e "$KIT/gguf-py/gguf/__init__.py" ] || { echo "FATAL: $KIT/gguf-py missing (carry $KIT)"; exit 2; }
REF_BUDGET_S=${REF_BUDGET_S:-50} python3 tools/demo35/ref_demo35.py "$W" "$KIT" "$W/$NAME" "$W/gguf_map.json" || { echo "FATAL: reference failed"; exit 4; }
mkdir -p "$W/refpack"; cp "$W/manifest.json" "$W/demo35.logits.f32" "$W/refpack/"
tar -C "$W/refpack" -cf "$OUT/demo35ref.tar" .
ls -l "$OUT"; echo "=== done"
