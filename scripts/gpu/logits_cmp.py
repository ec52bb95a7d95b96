#!/usr/bin/env python3
"""scripts/gpu/logits_cmp.py REF.f32 GOT.f32 ROWS [TOL] — compares two `gantry-engine eval`
logits files (float32 row-major [ROWS, n_vocab]), e.g. TP n against TP 1:
  - max over rows of ||got - ref|| / ||ref|| must be <= TOL (default 2e-2: the GPU tolerance of
    tests/golden with bf16 activations, see the fixtures README);
  - the top-1 token must agree on every row whose reference margin (top-1 minus top-2) is
    >= 0.05 (rows closer than that may flip under a different summation order).
Prints one line with both numbers; exit 0 when both hold, 1 when not, 2 on unreadable or
mismatched files. Plain Python (no numpy)."""
import array
import math
import sys


def load(path):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    return a


def main(argv):
    if len(argv) not in (4, 5):
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    try:
        ref, got, rows = load(argv[1]), load(argv[2]), int(argv[3])
        tol = float(argv[4]) if len(argv) == 5 else 2e-2
    except (OSError, ValueError) as e:
        print(f"logits_cmp: {e}", file=sys.stderr)
        return 2
    if rows < 1 or len(ref) == 0 or len(ref) != len(got) or len(ref) % rows:
        print(f"logits_cmp: {len(ref)} vs {len(got)} floats, not two [{rows}, n_vocab] arrays", file=sys.stderr)
        return 2
    n = len(ref) // rows
    worst, worst_row, judged, agree, all_agree, flips = 0.0, 0, 0, 0, 0, []
    for r in range(rows):
        R, G = ref[r * n:(r + 1) * n], got[r * n:(r + 1) * n]
        num = math.sqrt(sum((g - x) * (g - x) for g, x in zip(G, R)))
        den = math.sqrt(sum(x * x for x in R))
        err = num / den if den > 0 else num
        if not err <= worst:  # NaN counts as worst
            worst, worst_row = err, r
        top_r = max(range(n), key=R.__getitem__)
        top_g = max(range(n), key=G.__getitem__)
        second = max((R[i] for i in range(n) if i != top_r), default=R[top_r])
        all_agree += top_r == top_g
        if R[top_r] - second >= 0.05:
            judged += 1
            agree += top_r == top_g
            if top_r != top_g:
                flips.append(r)
    ok = worst <= tol and agree == judged
    print(f"rows {rows} x vocab {n}: max row rel err {worst:.3g} (row {worst_row}, tol {tol:g}); top-1 agree "
          f"{agree}/{judged} rows with margin >= 0.05 ({all_agree}/{rows} all rows)"
          + (f"; disagree at rows {flips[:10]}" if flips else "") + (": ok" if ok else ": FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
