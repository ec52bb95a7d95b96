#!/usr/bin/env bash
# Fresh Debian 12 -> installs dependencies, builds gantry, generates Python with the demo model,
# then starts redis, the engine and the router and streams a completion through the router.
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

echo
echo "== the serving stack: redis + gantry-engine serve (demo model) + gantry-router, one streamed request =="
scripts/serve_demo.sh build
