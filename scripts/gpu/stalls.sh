#!/bin/sh
# scripts/gpu/stalls.sh — Nsight Compute stall reasons of the decode products (issue 24), from the
# repository root on the GPU machine after scripts/gpu/pack.sh (bench_matvec in the pack):
#   OUT=... sh scripts/gpu/stalls.sh                       (carry build-cuda-pack)
# For each case (bench_matvec on one shape, Q4_K): pass 1 lists every launch of the kernel with its
# duration, grid, registers, DRAM / issue / occupancy %, and the top stall reasons (ncu raw metrics,
# $OUT/NAME.raw.csv; scripts/gpu/ncu_table.py launches); pass 2 profiles the last launch of the picked
# instantiation with the SourceCounters section (/tmp/NAME.ncu-rep: too big to bring back; its source
# page as $OUT/NAME.src.csv) and prints the SASS lines with the most stall samples and the
# instruction mix by opcode (ncu_table.py source). Env: OUT (/tmp/stalls), BUDGET (300 s), CASES (all:
# "mvm1 mvm1s mvr1 mvr1s mvr2 mvr2s mmq32 mmq8"; mvm1 / mvm1s need GANTRY_MVR=0 since the ring is the default;
# mvw32 / mvw32d: the wide kernel at 32 rows, asked for by name only).
set -u
OUT=${OUT:-/tmp/stalls}
BUDGET=${BUDGET:-300}
. "$(dirname "$0")/session_lib.sh"
session_begin build-cuda-pack/dist.tar.xz
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
T=$(dirname "$0")/ncu_table.py
MET="gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread,dram__throughput.avg.pct_of_peak_sustained_elapsed"
MET="$MET,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active"
MET="$MET,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio"
# prof NAME KERNEL-REGEX PICK BENCH-ARGS...
prof() {
  n=$1 k=$2 pk=$3
  shift 3
  step "$n.list" 120 "$NCU" --clock-control none --print-units base --csv --page raw --metrics "$MET" -k "regex:$k" \
    "$D/bench_matvec" --reps 2 --types Q4_K "$@"
  cp /tmp/step.txt "$OUT/$n.raw.csv"
  python3 "$T" launches "$OUT/$n.raw.csv" "$pk" | tee /tmp/pick.txt | tail -14
  i=$(awk '/^pick/ {print $2}' /tmp/pick.txt)
  [ -n "$i" ] && [ "$i" -ge 0 ] || { echo "== $n: nothing picked"; return; }
  step "$n.src" 120 "$NCU" --clock-control none --section SourceCounters --section WarpStateStats --import-source no \
    -k "regex:$k" --launch-skip "$i" -c 1 -f -o "/tmp/$n" "$D/bench_matvec" --reps 2 --types Q4_K "$@"
  "$NCU" -i "/tmp/$n.ncu-rep" --page source --csv --print-source sass >"$OUT/$n.src.csv" 2>&1
  python3 "$T" source "$OUT/$n.src.csv" 24
  "$NCU" -i "/tmp/$n.ncu-rep" --page details --section WarpStateStats 2>&1 | grep -E "Warp Cycles|Issued|Eligible|Active" | head -8
}
has() { case " ${CASES:-mvm1 mvm1s mvr1 mvr1s mvr2 mvr2s mmq32 mmq8} " in *" $1 "*) return 0 ;; esac; return 1; }
# batch 1: matvec_mma on the qwen3-8b swiglu (gate + up 12288x4096) and the 4096x12288 down
has mvm1s && prof mvm1s 'mvm_kernel' 'mvm_kernel<' --ns 1 --mmq 0 --shapes swiglu
has mvm1 && prof mvm1 'mvm_kernel' 'mvm_kernel<' --ns 1 --mmq 0 --shapes 4096x12288
# batch 1, the default path since dfe3a59: the ring kernel (kernels/matvec_ring.cuh) on the same shapes
has mvr1s && prof mvr1s 'mvr_kernel' 'mvr_kernel<' --ns 1 --mmq 0 --shapes swiglu
has mvr1 && prof mvr1 'mvr_kernel' 'mvr_kernel<' --ns 1 --mmq 0 --shapes 4096x12288
# batch 2 (and the 1 + 1 verify), the ring at two rows (bf16 arithmetic), same shapes
has mvr2s && prof mvr2s 'mvr_kernel' 'mvr_kernel<' --ns 2 --mmq 0 --shapes swiglu
has mvr2 && prof mvr2 'mvr_kernel' 'mvr_kernel<' --ns 2 --mmq 0 --shapes 4096x12288
# batch 32 / 8: mmq, x in one bf16 part (the engine's default), 12288x4096
has mmq32 && prof mmq32 'mmq_kernel' ', 1, 1>' --ns 1 --mmq 1 --shapes 12288x4096 --mmq-ns 32
has mmq8 && prof mmq8 'mmq_kernel' ', 1, 2>' --ns 1 --mmq 1 --shapes 12288x4096 --mmq-ns 8
# 9..32 rows, x in one bf16 part: the wide kernel (kernels/matvec_wide.cuh) on 12288x4096 and 4096x12288
has mvw32 && prof mvw32 'mvw_kernel' 'mvw_kernel<' --ns 1 --mmq 1 --shapes 12288x4096 --mmq-ns 32
has mvw32d && prof mvw32d 'mvw_kernel' 'mvw_kernel<' --ns 1 --mmq 1 --shapes 4096x12288 --mmq-ns 32
echo "== done in $(($(date +%s) - t0)) s"
