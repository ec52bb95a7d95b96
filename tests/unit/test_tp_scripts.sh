#!/usr/bin/env bash
# tests/unit/test_tp_scripts.sh — the helpers of scripts/gpu/tp.sh on known data (no GPU):
# tp_fit.awk recovers a and w of T(n) = a + w/n, refuses a single size and malformed lines;
# logits_cmp.py (when python3 is there) passes equal-within-tolerance logits and fails on an
# error above TOL, a flipped top-1 with a clear margin, and mismatched files.
# Usage: test_tp_scripts.sh REPO_ROOT
set -u
cd "${1:?repo root}" || exit 1
fail=0
check() { # name expected-status command...
  local name=$1 want=$2; shift 2
  out=$("$@" 2>&1); st=$?
  if [ "$st" != "$want" ]; then echo "FAIL $name: exit $st, want $want"; echo "$out"; fail=1; else echo "ok $name"; fi
}
has() { # name text: the last output contains text
  case "$out" in *"$2"*) echo "ok $1" ;; *) echo "FAIL $1: no '$2' in:"; echo "$out"; fail=1 ;; esac
}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

printf '1 10\n2 5.5\n4 3.25\n' >"$T/exact"
check "fit exact" 0 awk -f scripts/gpu/tp_fit.awk "$T/exact"
has "fit a, w" "fit T(n) = a + w/n: a = 1.000 ms, w = 9.000 ms (3 sizes, rms residual 0.000 ms)"
has "fit speed-up" "| 4 | 3.250 | 3.08x | 3.250 |"
# the seed's deployment: a fixed ~6 ms that did not shrink (noisy points: least squares, not exact)
printf '1 30.1\n2 18.0\n4 12.1\n8 9.0\n' >"$T/seed"
check "fit noisy" 0 awk -f scripts/gpu/tp_fit.awk "$T/seed"
has "fit noisy a" "a = 6.0"
printf '1 7.0\n' >"$T/one"
check "fit one size" 0 awk -f scripts/gpu/tp_fit.awk "$T/one"
has "fit one size says so" "fit: needs two or more TP sizes"
printf '1 7.0\n2 ?\n' >"$T/bad"
check "fit bad line" 1 awk -f scripts/gpu/tp_fit.awk "$T/bad"
has "fit bad line named" "tp_fit: bad line 2: 2 ?"

if command -v python3 >/dev/null; then
  python3 - "$T" <<'PY'
import array, sys
d = sys.argv[1]
rows, n = 4, 50
ref = array.array("f", [((r * 31 + i * 17) % 23) * 0.25 for r in range(rows) for i in range(n)])
for r in range(rows):  # a clear top-1 at i = r: margin >= 0.05 on every row
    ref[r * n + r] = 10.0
close = array.array("f", [x * (1 + 5e-3) for x in ref])
far = array.array("f", [x * 1.1 for x in ref])
flip = array.array("f", ref)
flip[2 * n + 2] = 0.0  # row 2 loses its top token, error ~0.6 of the row
for name, a in (("ref", ref), ("close", close), ("far", far), ("flip", flip)):
    open(f"{d}/{name}.f32", "wb").write(a.tobytes())
PY
  check "cmp close" 0 python3 scripts/gpu/logits_cmp.py "$T/ref.f32" "$T/close.f32" 4
  has "cmp close line" "top-1 agree 4/4 rows with margin >= 0.05 (4/4 all rows): ok"
  check "cmp far" 1 python3 scripts/gpu/logits_cmp.py "$T/ref.f32" "$T/far.f32" 4
  has "cmp far line" "max row rel err 0.1 "
  check "cmp flip" 1 python3 scripts/gpu/logits_cmp.py "$T/ref.f32" "$T/flip.f32" 4 1.0
  has "cmp flip line" "top-1 agree 3/4 rows with margin >= 0.05 (3/4 all rows); disagree at rows [2]: FAILED"
  check "cmp shape" 2 python3 scripts/gpu/logits_cmp.py "$T/ref.f32" "$T/ref.f32" 3
else
  echo "note: no python3, logits_cmp.py not checked"
fi
exit $fail
