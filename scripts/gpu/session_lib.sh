# Sourced (POSIX sh) by the one-off device-call scripts (attn.sh, attn_decode.sh, prefill.sh),
# run from the repository root on the GPU machine after scripts/gpu/pack.sh.

# session_unpack TARBALL: unpacks build-cuda-dist/ from TARBALL unless already there, prints its
# COMMIT; sets D (the programs) and the environment the GPU tests read.
session_unpack() {
  [ -x build-cuda-dist/bench_decode ] || tar xJf "$1" || echo "== unpack FAILED"
  D=$PWD/build-cuda-dist
  cat "$D/COMMIT" 2>/dev/null
  export LD_LIBRARY_PATH="$D/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  export GANTRY_GOLDEN="$PWD/tests/golden" GANTRY_SRC="$PWD" GANTRY_BIN="$D"
}

# session_begin TARBALL: the common start of a budgeted session: makes $OUT, empties $ALL
# ($OUT/all.txt, the log every step appends to), starts the budget clock t0, session_unpack
# TARBALL, prints the GPU.
session_begin() {
  mkdir -p "$OUT"
  ALL=$OUT/all.txt
  : >"$ALL"
  t0=$(date +%s)
  session_unpack "$1"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
}

# session_mkmodel GGUF LOG ARGS...: gantry-mkmodel ARGS --out GGUF (through GGUF.tmp) in the
# background, output to LOG; GGUF.done appears when it ends, made or failed.
session_mkmodel() {
  _mk_out=$1 _mk_log=$2
  shift 2
  rm -f "$_mk_out.done"
  ( timeout ${MK_TIMEOUT:-400} "$D/gantry-mkmodel" "$@" --out "$_mk_out.tmp" >"$_mk_log" 2>&1 && mv "$_mk_out.tmp" "$_mk_out"
    touch "$_mk_out.done" ) &
}

# The budgeted steps: t0 (start, seconds), BUDGET (seconds), ALL (the log every step appends to).
left() { echo $((BUDGET - ($(date +%s) - t0))); }

# session_wait GGUF: waits for its session_mkmodel (done or failed) while the budget lasts;
# true when GGUF was made.
session_wait() {
  while [ ! -e "$1.done" ] && [ "$(left)" -gt 20 ]; do sleep 1; done
  [ -s "$1" ]
}

# step NAME TIMEOUT COMMAND...: runs COMMAND under min(TIMEOUT, budget left), its output in
# /tmp/step.txt and appended to $ALL after a "#### NAME" line; returns 1 only when skipped.
step() {
  name=$1 to=$2
  shift 2
  l=$(left)
  if [ "$l" -lt 10 ]; then echo "== $name SKIPPED (budget)"; return 1; fi
  [ "$to" -gt "$l" ] && to=$l
  s=$(date +%s)
  echo "#### $name: $*" >>"$ALL"
  timeout "$to" "$@" >/tmp/step.txt 2>&1
  r=$?
  cat /tmp/step.txt >>"$ALL"
  echo "== $name rc=$r ($(($(date +%s) - s)) s)"
  return 0
}

# phases NAME: the step lines of /tmp/step.txt (a run under GANTRY_LOG_SLOW_STEP_MS=0.0001) summed (sched.c step(): "slow step: ms= plan_ms=
# forward_ms= emit_ms= seqs= tokens= captures=")
phases() {
  grep 'slow step:' /tmp/step.txt | sed 's/.*slow step: //' | awk -v name="$1" '
    { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      big = v["tokens"] + 0 >= 64; if (big && !was) r++; was = big  # prefill steps start each of bench_spec s runs (off, spec)
      n[r]++; ms[r] += v["ms"]; fw[r] += v["forward_ms"]; em[r] += v["emit_ms"]; pl[r] += v["plan_ms"]; cap[r] += v["captures"]
      t = r SUBSEP v["tokens"] "/" v["seqs"]; c[t]++; f[t] += v["forward_ms"]; e[t] += v["emit_ms"] }
    END { for (k = 1; k <= r; k++) {
        printf "%-24s run %d: steps %4d  ms/step %7.3f  plan %6.3f  forward %7.3f  emit %7.3f  captures %d\n",
               name, k, n[k], ms[k] / n[k], pl[k] / n[k], fw[k] / n[k], em[k] / n[k], cap[k]
        s = "   tokens/seqs: "
        for (t in c) { split(t, tk, SUBSEP); if (tk[1] == k) s = s sprintf("%s x%d (fw %.3f em %.3f)  ", tk[2], c[t], f[t] / c[t], e[t] / c[t]) }
        print s } }'
}

# session_q4_models: M8 / M9 = qwen3-8b and qwen35-9b (MTP block, BF16 head) Q4_K_M in MODELDIR
# (/tmp), each made in the background (session_mkmodel, log in $OUT) unless already there.
session_q4_models() {
  MD=${MODELDIR:-/tmp}
  M9=$MD/qwen35-9b.Q4_K_M.mtp.gguf M8=$MD/qwen3-8b.Q4_K_M.gguf
  [ -s "$M8" ] || session_mkmodel "$M8" "$OUT/mk8.txt" --preset qwen3-8b --type Q4_K_M --threads 7
  [ -s "$M9" ] || session_mkmodel "$M9" "$OUT/mk9.txt" --preset qwen35-9b --type Q4_K_M --mtp --keep-output-bf16 --threads 7
}
