#!/usr/bin/env python3
"""scripts/gpu/ncu_table.py — condenses Nsight Compute CSV exports for scripts/gpu/stalls.sh.

  ncu_table.py launches RAW.csv [PICK]   one line per profiled launch of an `ncu --page raw --csv`
      export (duration, grid, registers, DRAM %, issue %, occupancy, the top stall reasons in
      warps per issued instruction); with PICK (a substring of the kernel name) prints on the last
      line "pick N": the index of the last launch whose name holds PICK (for --launch-skip N).
  ncu_table.py source SRC.csv [TOP]      the TOP (30) SASS lines of `ncu -i REP --page source --csv
      --print-source sass` with the most stall samples, then the sample columns summed.
"""
import csv
import sys


def num(v):
    try:
        return float(str(v).replace(",", ""))
    except ValueError:
        return None


def rows_of(path):
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # the program's own stdout is interleaved
    return list(csv.reader(lines))


def launches(path, pick=None):
    rows = rows_of(path)
    if not rows:
        print("no ncu rows in", path)
        return
    head, body = rows[0], [r for r in rows[1:] if r and r[0] != "" and num(r[0]) is not None]
    col = {h: i for i, h in enumerate(head)}
    stall = [h for h in head if h.startswith("smsp__average_warps_issue_stalled_")]
    def g(r, k):
        return num(r[col[k]]) if k in col else None
    want = None
    print("%3s %-44s %8s %6s %4s %6s %6s %6s  top stalls (warps per issue)" % ("id", "kernel", "us", "grid", "regs", "dram%", "issue%", "occ%"))
    for i, r in enumerate(body):
        name = r[col.get("Kernel Name", 4)]
        short = name.split("(")[0][:44]
        st = sorted(((g(r, h) or 0.0, h.replace("smsp__average_warps_issue_stalled_", "").replace("_per_issue_active.ratio", "")) for h in stall), reverse=True)
        dur = g(r, "gpu__time_duration.sum")
        unit_ns = True
        print("%3d %-44s %8.2f %6d %4d %6.1f %6.1f %6.1f  %s" % (
            i, short, (dur or 0) / (1000.0 if unit_ns else 1.0), int(g(r, "launch__grid_size") or 0),
            int(g(r, "launch__registers_per_thread") or 0), g(r, "dram__throughput.avg.pct_of_peak_sustained_elapsed") or 0,
            g(r, "smsp__issue_active.avg.pct_of_peak_sustained_active") or 0,
            g(r, "sm__warps_active.avg.pct_of_peak_sustained_active") or 0,
            " ".join("%s %.2f" % (n, v) for v, n in st[:6] if v > 0)))
        if pick and pick in name:
            want = i
    if pick:
        print("pick", want if want is not None else -1)


def opcode(sass):
    t = sass.split()
    while t and (t[0].startswith("@") or t[0].startswith("{")):
        t = t[1:]
    return t[0].rstrip(";").split(".")[0] if t else "?"


def source(path, top=30):
    rows = rows_of(path)
    hi = next((i for i, r in enumerate(rows) if r and r[0] == "Address"), None)
    if hi is None:
        print("no source rows in", path)
        return
    head, body = rows[hi], [r for r in rows[hi + 1:] if len(r) == len(rows[hi])]
    col = {h: i for i, h in enumerate(head)}
    samp = [h for h in head if ("Sampl" in h or h.startswith("stall_")) and "Not Issued" not in h and "Not-issued" not in h]
    key = next((h for h in head if h.startswith("Warp Stall Sampling (All")), samp[0] if samp else None)
    if key is None:
        print("no sampling column; columns:", head)
        return
    src = col.get("Source", 1)
    tot = {h: 0.0 for h in samp}
    for r in body:
        for h in samp:
            tot[h] += num(r[col[h]]) or 0.0
    body.sort(key=lambda r: -(num(r[col[key]]) or 0.0))
    all_s = tot[key] or 1.0
    print("top %d SASS lines by %s (%% of %d samples)" % (top, key, int(all_s)))
    for r in body[:top]:
        v = num(r[col[key]]) or 0.0
        detail = " ".join("%s=%d" % (h[:28], num(r[col[h]])) for h in samp if h != key and (num(r[col[h]]) or 0) >= 0.05 * v and v > 0)
        print("%5.1f%%  %-60s %s" % (100.0 * v / all_s, r[src][:60], detail[:200]))
    ie = col.get("Instructions Executed")
    if ie is not None:
        mix, total = {}, 0.0
        for r in body:
            v = num(r[ie]) or 0.0
            mix[opcode(r[src])] = mix.get(opcode(r[src]), 0.0) + v
            total += v
        print("warp instructions executed %d; by opcode: %s" % (total, " ".join(
            "%s %.1f%%" % (k, 100.0 * v / total) for k, v in sorted(mix.items(), key=lambda kv: -kv[1])[:24])))
    print("sums:", "; ".join("%s %d" % (h, v) for h, v in sorted(tot.items(), key=lambda kv: -kv[1]) if v > 0)[:2000])


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "launches":
        launches(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
    elif len(sys.argv) >= 3 and sys.argv[1] == "source":
        source(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 30)
    else:
        print(__doc__)
        sys.exit(2)
