#!/bin/sh
# scripts/gpu/slim.sh — keeps what a GPU call sends under the device tool's 64 MiB (the tracked
# files travel, and with both demo models tests/golden alone is ~70 MB): moves the golden files a
# call does not need out of the working tree, into .git/slim-stash/ (the git directory never
# travels), and puts them back. Run here, not on the device:
#   sh scripts/gpu/slim.sh hide PROFILE   before the run call (prints what stays and the tree size)
#   sh scripts/gpu/slim.sh restore        right after it (also safe when nothing is hidden)
# Profiles (what is hidden):
#   tests   the GPU test suite (run_tests.sh, verify.sh, tp_memcheck.sh): the tokenizer-only vocab,
#           the dequantization dumps and demo35's model and logits (its GPU cases skip; ~48 MB +
#           build-cuda-pack's 7.8 MB)
#   stack   a served-stack or bench call on demo35, and demo35's GPU cases (GANTRY_GOLDEN_ONLY=demo35
#           test_cuda_golden, test_cuda_tp test_local_demo35): every golden file but demo35's and the
#           manifests (~25 MB)
#   spec    the GPU golden cases of every tiny model and demo35 with the stack (spec_sweep.sh TESTS=...):
#           as tests, but demo35 stays and the first demo's model and logits go (~49 MB + both packs)
# git status shows hidden files as deleted until restore; never commit while they are hidden.
set -eu
cd "$(dirname "$0")/../.."
S=$(git rev-parse --git-dir)/slim-stash
case "${1:-}" in
hide)
  [ ! -d "$S" ] || { echo "slim.sh: files are already hidden ($S): restore first" >&2; exit 1; }
  case "${2:-}" in
  tests) pat='^tests/golden/(qwen3-vocab\.gguf|.*\.dequant\..*\.f32|demo35/.*\.(gguf|f32))$' ;;
  stack) pat='^tests/golden/(qwen3|qwen35-tiny|demo/.*\.(f32|gguf)$|.*\.dequant\.)' ;;
  spec) pat='^tests/golden/(qwen3-vocab\.gguf|.*\.dequant\..*\.f32|demo/.*\.(gguf|f32))$' ;;
  *) echo "usage: slim.sh hide tests|stack|spec | restore" >&2; exit 2 ;;
  esac
  mkdir -p "$S"
  git ls-files tests/golden | grep -E "$pat" | while read -r f; do
    mkdir -p "$S/$(dirname "$f")" && mv "$f" "$S/$f"
  done
  echo "slim.sh: hid $(find "$S" -type f | wc -l) files ($(du -sh "$S" | cut -f1)); the tree now sends $(git ls-files -z | xargs -0 du -ck 2>/dev/null | tail -1 | cut -f1) KiB of tracked files"
  ;;
restore)
  [ -d "$S" ] || exit 0
  (cd "$S" && find . -type f) | while read -r f; do
    mkdir -p "$(dirname "$f")" && mv "$S/$f" "$f"
  done
  rm -rf "$S"
  git status --short tests/golden | grep '^ D' && { echo "slim.sh: files still missing" >&2; exit 1; } || true
  ;;
*) echo "usage: slim.sh hide tests|stack|spec | restore" >&2; exit 2 ;;
esac
