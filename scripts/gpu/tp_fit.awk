# scripts/gpu/tp_fit.awk — the fixed per-token cost of tensor parallelism, the seed's method:
# least-squares fit of T(n) = a + w/n to decode times T (ms per step) at TP sizes n.
# Input: lines "n T" (TP size, ms per decode step at batch 1). Output: a table with the
# speed-up against TP 1 and the fitted value per size, then
#   "fit T(n) = a + w/n: a = A ms, w = W ms (K sizes, rms residual R ms)"
# or "fit: needs two or more TP sizes" (exit 0 either way; exit 1 on malformed input).
# Usage: awk -f scripts/gpu/tp_fit.awk times.txt
BEGIN { k = 0 }
NF == 0 { next }
NF != 2 || $1 !~ /^[0-9]+$/ || $1 < 1 || $2 !~ /^[0-9.]+([eE][-+]?[0-9]+)?$/ || $2 <= 0 {
  printf "tp_fit: bad line %d: %s\n", NR, $0 > "/dev/stderr"; bad = 1; exit 1
}
{ n[k] = $1 + 0; t[k] = $2 + 0; if (n[k] == 1) t1 = t[k]; if (!(n[k] in seen)) distinct++; seen[n[k]] = 1; k++ }
END {
  if (bad) exit 1
  if (distinct >= 2) {
    for (i = 0; i < k; i++) { x = 1 / n[i]; sx += x; st += t[i] }
    mx = sx / k; mt = st / k
    for (i = 0; i < k; i++) { x = 1 / n[i]; sxx += (x - mx) ^ 2; sxt += (x - mx) * (t[i] - mt) }
    w = sxt / sxx; a = mt - w * mx
  }
  print "| TP | ms/step | speed-up vs TP 1 | fit a + w/n |"
  print "|---|---|---|---|"
  for (i = 0; i < k; i++) {
    f = distinct >= 2 ? sprintf("%.3f", a + w / n[i]) : "-"
    if (distinct >= 2) ss += (t[i] - a - w / n[i]) ^ 2
    printf "| %d | %.3f | %s | %s |\n", n[i], t[i], t1 ? sprintf("%.2fx", t1 / t[i]) : "-", f
  }
  if (distinct < 2) { print "fit: needs two or more TP sizes"; exit 0 }
  printf "fit T(n) = a + w/n: a = %.3f ms, w = %.3f ms (%d sizes, rms residual %.3f ms)\n", a, w, k, sqrt(ss / k)
}
