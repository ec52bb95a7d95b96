#!/usr/bin/env bash
# Installs the Debian 12 packages gantry builds and tests with (root or sudo).
set -euo pipefail
pkgs=(build-essential cmake pkg-config git
      libgrpc-dev libprotobuf-c-dev protobuf-c-compiler
      libhiredis-dev redis-server redis-sentinel libevent-dev libjansson-dev libpcre2-dev libutf8proc-dev
      libcurl4-openssl-dev libcmocka-dev curl
      openssl # test_engine_auth makes its TLS certificates with the openssl command
      systemd) # systemd-analyze for test_systemd_units (works offline, without systemd as PID 1)
# node + npm for the e2e tests (the official openai npm client); a machine may already have a
# Node.js that bundles npm (nodesource), which Debian's npm package conflicts with
command -v node >/dev/null && command -v npm >/dev/null || pkgs+=(nodejs npm)
missing=()
for p in "${pkgs[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
