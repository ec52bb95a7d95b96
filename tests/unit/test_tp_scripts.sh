#!/usr/bin/env bash
# tests/unit/test_tp_scripts.sh — the helpers of scripts/gpu/tp.sh on known data (no GPU):
# tp_fit.awk recovers a and w of T(n) = a + w/n, refuses a single size and malformed lines;
# logits_cmp.py (when python3 is there) passes equal-within-tolerance logits and fails on an
# error above TOL, a flipped top-1 with a clear margin, and mismatched files; tp_predict.py
# (scripts/gpu/tp_local.sh's table) recovers a and w from runs at two depths and three TP sizes,
# adds the all-reduces at both latencies, splits a into its op kinds and host, projects the
# all-reduce + add_rmsnorm fusion, names the op kinds that do not shrink, and fails on a missing log.
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
  # tp_predict.py: per layer t_n = 0.4/n + 0.05 ms, the rest f_n = 0.5/n + 0.3 ms, 10 layers:
  # T_n = 4.5/n + 0.8 exactly (a = 0.8, w = 4.5), 20 all-reduces per step
  mkdir -p "$T/pred"
  for n in 1 2 4; do
    for k in 2 4; do
      t=$(awk -v n=$n -v k=$k 'BEGIN {printf "%.4f", 0.5 / n + 0.3 + k * (0.4 / n + 0.05)}')
      {
        echo "| batch | prefill tok/s | decode ms/step | tok/s/seq | tok/s total | GB/step | GB/token | roofline ms | % of roofline | graph/eager steps |"
        echo "|---|---|---|---|---|---|---|---|---|---|"
        echo "| 1 | 100 | $t | 1 | 1 | 0.1 | 0.1 | 0.1 | 10.0 % | 60/4 |"
        echo
        echo "batch 1, one decode step per op ($((5 + 2 * k)) ops, eager with an event pair per op); % of the GPU time of its graph replay 900.0 us:"
        echo "| op | calls | us | % of step |"
        echo "|---|---|---|---|"
        echo "| matmul Q4_K 1024x$((1024 / n)) x1 mmq | 8 | $((400 / n)).0 | 40.0 % |"
        echo "| rmsnorm | 9 | 20.0 | 2.0 % |"
        echo "| add_rmsnorm | $((2 * k)) | $((10 * k)).0 | 2.0 % |"
        echo "| launch / idle gap (step - sum of ops) | | 30.0 | 3.0 % |"
        echo "sum of ops 420.0 us vs graph replay 450.0 us GPU (mean of 4): gap $((30 - n)).0 us (launch / idle inside the graph); decode step wall 500.0 us (median): $((50 + n)).0 us more = host (batch upload, ids or logits copy, sync)"
      } >"$T/pred/bench.m.L$k.n$n.txt"
    done
  done
  echo "| 1 | plain | f32 | 4096 | 9.0 | 9.5 | 8.0 | 8.5 | 7.00 | 7.50 | ok |" >"$T/pred/bench_comm.txt"
  check "predict" 0 python3 scripts/gpu/tp_predict.py "$T/pred" "m:10:1024:2,4" --batches 1 --target m:1:1.0
  has "predict custom row" "| m | 1 | 5.300 | 3.050 | 1.925 | 2.250 / 1.125 | 0.800 | 20 | custom 5.0 | 3.150 (317) | 2.025 (494) | 0.900 (15 % of 6.02) | +68 % / +56 % |"
  has "predict nccl row" "| NCCL 1-rank 7.0 (4 KB) | 3.190 (313) | 2.065 (484) | 0.940 (16 % of 6.02)"
  has "predict target" "target: m batch 1 TP4 fixed cost 0.900 ms/step (a 0.800 + 20 x 5.0 us) <= 1.0 ms: met"
  has "predict flat ops" "op kinds that do not halve: add_rmsnorm 40 -> 40 us, rmsnorm 20 -> 20 us; launch / idle gap 29.0 -> 26.0 us, host 51.0 -> 54.0 us"
  # the parts of a: add_rmsnorm 10 us per layer (x 450 / 420, the profile's graph / sum of ops) over
  # 10 layers, rmsnorm 20 us, the rest host; 5 + 2 x 10 ops; fused: 0.800 - 0.107 + 20 x 5 us
  has "predict parts of a" "add_rmsnorm 0.107, rmsnorm 0.021; host + graph launch 0.671 (a 0.800); 25 ops per rank step at TP4 = 32.00 us of a per op"
  has "predict fused" "(add_rmsnorm's 0.107 gone, the fused kernel costing one all-reduce): fixed TP4 0.793 ms at 5.0 us"
  rm "$T/pred/bench.m.L4.n2.txt"
  check "predict missing log" 1 python3 scripts/gpu/tp_predict.py "$T/pred" "m:10:1024:2,4" --batches 1
else
  echo "note: no python3, logits_cmp.py not checked"
fi
exit $fail
