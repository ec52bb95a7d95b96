#!/usr/bin/env bash
# tests/deploy/docker_runtime_deps.sh BUILD_DIR — runs docker_runtime_deps.py (see there).
exec python3 "$(dirname "$0")/docker_runtime_deps.py" "$@"
