#!/usr/bin/env bash
# Fresh Debian 12 -> installs dependencies, builds gantry and generates Python with the demo model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
echo "== building (Release) =="
GANTRY_WERROR=OFF scripts/build.sh Release >/dev/null
model=tests/golden/demo/gantry-demo-code-22m.Q4_K_M.gguf
./build/gantry-engine info --model "$model"
echo
./build/gantry-engine generate --model "$model" --max-tokens 160 --prompt 'def fibonacci(n):
'
