#!/usr/bin/env python3
"""scripts/gpu/tp_predict.py: the TP2 / TP4 prediction from one GPU (issue 28; method in engine/TP.md
"The TP4 prediction"), from the logs scripts/gpu/tp_local.sh writes.

Inputs, in LOGDIR:
  bench.<model>.L<K>.n<n>.txt  bench_decode of the first K layers (GANTRY_MODEL_LAYERS=K) of a
                               production-width file, as rank 0 of n alone (--solo n; n = 1: plain)
  bench_comm.txt               bench_comm --tp 1 (one-rank NCCL, plain, f32) for NCCL's own figure
Per model (name:layers:n_embd:K1,K2) and batch B:
  T_n(K)   the median decode ms/step of those runs; per-layer t_n = (T_n(K2) - T_n(K1)) / (K2 - K1),
           the rest f_n = T_n(K1) - K1 t_n, the whole model T_n = f_n + layers * t_n;
  a, w     least squares of T_n = a + w / n over n = 1, 2, 4: w / n is the part that shrinks, a the
           part that does not (replicated norms and KV heads, embedding, sampling, launch gaps, host);
  R        all-reduces per step: 2 per layer (attention or GDN out-projection, FFN down);
  L        one all-reduce's latency: --custom-us (default 5: ~4-5 us for 32 KB, one-shot custom
           all-reduce at TP 2 / 4 over NVLink, SGLang on H100) and NCCL's in-graph median of a
           one-rank run at the step's size (B * n_embd * 4 bytes, next power of two);
  TP n     T_n + R * L ms per step, B * 1000 / that tok/s; fixed cost per step a + R * L, set
           against the 6.02 ms measured on four V100s and the +38 % / +28 % per doubling.
Then, per model and batch, the parts of a: each op kind's profiled time (scaled by graph replay /
sum of ops, so the eager event pairs drop out), taken to the whole model and fitted a_k + w_k / n
like the step; what is left of a is host + graph launch; a per op of the TP4 rank step; and the
fixed cost with the all-reduce fused into the residual add + RMSNorm after it (add_rmsnorm's a_k
removed). Then, per model at batch 1, the op kinds whose time does not shrink (TP4 / TP1 > 0.5 in
the per-op profile of the K2-layer runs), with the launch gap and host time of the step.
Prints markdown; exit 1 when a needed log or value is missing.
Usage: tp_predict.py LOGDIR "qwen3-8b:36:4096:2,4 qwen35-9b:32:4096:4,8" [--batches 1,8] [--custom-us 5]
       [--target qwen35-9b:1:0.5] [--title TEXT]"""
import os
import re
import sys

V100_FIXED_MS = 6.02
V100_DOUBLING = (0.38, 0.28)


def decode_ms(path, batch):
    """Median decode ms/step of batch in an engine/models/bench.h table."""
    with open(path) as f:
        for line in f:
            c = [x.strip() for x in line.split("|")]
            if len(c) in (12, 13) and c[1].isdigit() and int(c[1]) == batch:
                return float(c[3])
    raise ValueError(f"{path}: no decode row for batch {batch}")


def profile(path, batch, full=False):
    """Per op kind (the label's first word) the us of the profiled step, and (gap, host) us; with full,
    also the op count of the step and the scale graph replay / sum of ops (the eager per-op times
    carry an event pair each: scaled, they add up to the graph's GPU time)."""
    kinds, gap, host, on, n_ops, scale = {}, None, None, False, None, None
    with open(path) as f:
        for line in f:
            m = re.match(r"^batch (\d+), one decode step per op(?: \((\d+) ops)?", line)
            if m:
                on = int(m.group(1)) == batch
                if on and m.group(2):
                    n_ops = int(m.group(2))
                continue
            if not on:
                continue
            c = [x.strip() for x in line.split("|")]
            if len(c) == 6 and c[3].replace(".", "", 1).lstrip("-").isdigit() and not c[1].startswith(("op", "(", "launch", "event")):
                k = c[1].split()[0]
                kinds[k] = kinds.get(k, 0.0) + float(c[3])
            m = re.match(r"^sum of ops ([-0-9.]+) us vs graph replay ([-0-9.]+) us GPU .*gap ([-0-9.]+) us.*: ([-0-9.]+) us more = host", line)
            if m:
                gap, host = float(m.group(3)), float(m.group(4))
                if float(m.group(1)) > 0:
                    scale = float(m.group(2)) / float(m.group(1))
                on = False
    if full:
        return kinds, gap, host, n_ops, scale
    return kinds, gap, host


def parts_of_a(logdir, name, layers, k1, k2, batch, a, ns=(1, 2, 4)):
    """The parts of a (ms, whole model): per op kind, its profiled us scaled to the graph's GPU time,
    taken to the whole model from the K1 / K2 runs as the step is, and fitted u = a_k + w_k / n; the
    rest of a is host + graph launch. Also the ops per rank step at the largest n. None when a
    profile lacks the counts."""
    u, ops = {}, {}
    for n in ns:
        for k in (k1, k2):
            kinds, _, _, n_ops, scale = profile(os.path.join(logdir, f"bench.{name}.L{k}.n{n}.txt"), batch, full=True)
            if n_ops is None or scale is None:
                return None
            ops[(n, k)] = n_ops
            for kind, us in kinds.items():
                u.setdefault(kind, {})[(n, k)] = us * scale
    whole = lambda v1, v2: v1 + (layers - k1) * (v2 - v1) / (k2 - k1)  # f + layers * per-layer
    parts = {}
    for kind, v in u.items():
        if kind == "all_reduce":  # the solo rank's no-op: its latency is R x L in the table
            continue
        ts = [whole(v.get((n, k1), 0.0), v.get((n, k2), 0.0)) / 1e3 for n in ns]
        a_k, _ = fit(ns, ts)
        parts[kind] = a_k
    n_big = max(ns)
    return parts, a - sum(parts.values()), whole(ops[(n_big, k1)], ops[(n_big, k2)])


def nccl_us(path, nbytes):
    """In-graph median us of the one-rank plain f32 NCCL all-reduce at the first size >= nbytes."""
    best = None
    with open(path) as f:
        for line in f:
            c = [x.strip() for x in line.split("|")]
            if len(c) == 13 and c[1] == "1" and c[2] == "plain" and c[3] == "f32" and c[4].isdigit():
                size = int(c[4])
                if size >= nbytes and (best is None or size < best[0]):
                    best = (size, float(c[9]))
    if best is None:
        raise ValueError(f"{path}: no one-rank plain f32 row of >= {nbytes} bytes")
    return best


def fit(ns, ts):
    xs = [1.0 / n for n in ns]
    mx, mt = sum(xs) / len(xs), sum(ts) / len(ts)
    sxx = sum((x - mx) ** 2 for x in xs)
    w = sum((x - mx) * (t - mt) for x, t in zip(xs, ts)) / sxx
    return mt - w * mx, w


def main(argv):
    args, opts = [], {"--batches": "1,8", "--custom-us": "5", "--target": "qwen35-9b:1:0.5", "--title": ""}
    i = 1
    while i < len(argv):
        if argv[i] in opts and i + 1 < len(argv):
            opts[argv[i]] = argv[i + 1]
            i += 2
        else:
            args.append(argv[i])
            i += 1
    if len(args) != 2:
        print("usage: tp_predict.py LOGDIR \"name:layers:n_embd:K1,K2 ...\" [--batches 1,8] [--custom-us 5] "
              "[--target model:batch:ms] [--title TEXT]", file=sys.stderr)
        return 2
    logdir, specs = args
    batches = [int(b) for b in opts["--batches"].split(",")]
    custom = float(opts["--custom-us"])
    t_model, t_batch, t_ms = opts["--target"].split(":")
    ns = (1, 2, 4)
    rows, notes, bad = [], [], 0
    comm = os.path.join(logdir, "bench_comm.txt")
    for spec in specs.split():
        name, layers, d, depths = spec.split(":")
        layers, d = int(layers), int(d)
        k1, k2 = (int(k) for k in depths.split(","))
        n_ar = 2 * layers
        for b in batches:
            try:
                T = {}
                for n in ns:
                    t1 = decode_ms(os.path.join(logdir, f"bench.{name}.L{k1}.n{n}.txt"), b)
                    t2 = decode_ms(os.path.join(logdir, f"bench.{name}.L{k2}.n{n}.txt"), b)
                    per = (t2 - t1) / (k2 - k1)
                    T[n] = t1 - k1 * per + layers * per
                a, w = fit(ns, [T[n] for n in ns])
            except (OSError, ValueError) as e:
                print(f"tp_predict: {name} batch {b}: {e}", file=sys.stderr)
                bad = 1
                continue
            lats = [("custom", custom, None)]
            try:
                size, us = nccl_us(comm, b * d * 4)
                lats.append(("NCCL 1-rank", us, size))
            except (OSError, ValueError) as e:
                print(f"tp_predict: {e}", file=sys.stderr)
                bad = 1
            for what, us, size in lats:
                p2, p4 = T[2] + n_ar * us / 1e3, T[4] + n_ar * us / 1e3
                fixed = a + n_ar * us / 1e3
                label = f"{what} {us:.1f}" + (f" ({size // 1024} KB)" if size else "")
                rows.append(f"| {name} | {b} | {T[1]:.3f} | {T[2]:.3f} | {T[4]:.3f} | {w / 2:.3f} / {w / 4:.3f} | {a:.3f} "
                            f"| {n_ar} | {label} | {p2:.3f} ({1e3 * b / p2:.0f}) | {p4:.3f} ({1e3 * b / p4:.0f}) "
                            f"| {fixed:.3f} ({100 * fixed / V100_FIXED_MS:.0f} % of 6.02) "
                            f"| {100 * (T[1] / p2 - 1):+.0f} % / {100 * (p2 / p4 - 1):+.0f} % |")
                if what == "custom" and name == t_model and b == int(t_batch):
                    ok = fixed <= float(t_ms)
                    notes.append(f"target: {name} batch {b} TP4 fixed cost {fixed:.3f} ms/step (a {a:.3f} + {n_ar} x "
                                 f"{us:.1f} us) <= {t_ms} ms: {'met' if ok else 'NOT met'}")
            try:
                pa = parts_of_a(logdir, name, layers, k1, k2, b, a)
            except (OSError, ValueError) as e:
                print(f"tp_predict: {name} batch {b} parts of a: {e}", file=sys.stderr)
                pa = None
            if pa:
                parts, rest, n_ops = pa
                top = sorted(parts.items(), key=lambda kv: -kv[1])
                listed = ", ".join(f"{k} {v:.3f}" for k, v in top[:8] if abs(v) >= 0.0005)
                others = sum(v for k, v in top[8:])
                ar_norm = parts.get("add_rmsnorm", 0.0)
                notes.append(f"parts of a, {name} batch {b} (ms per step, whole model; per-op profile scaled to the "
                             f"graph's GPU time): {listed}" + (f", other ops {others:.3f}" if top[8:] else "")
                             + f"; host + graph launch {rest:.3f} (a {a:.3f}); {n_ops:.0f} ops per rank step at TP4 "
                             f"= {1e3 * a / n_ops:.2f} us of a per op; with the all-reduce fused into the residual "
                             f"add + RMSNorm that follows it (add_rmsnorm's {ar_norm:.3f} gone, the fused kernel "
                             f"costing one all-reduce): fixed TP4 {a - ar_norm + n_ar * custom / 1e3:.3f} ms "
                             f"at {custom:.1f} us")
        # what does not shrink: op kinds of the K2-layer profile at batch 1, TP1 against TP4
        try:
            k_1, g1, h1 = profile(os.path.join(logdir, f"bench.{name}.L{k2}.n1.txt"), 1)
            k_4, g4, h4 = profile(os.path.join(logdir, f"bench.{name}.L{k2}.n4.txt"), 1)
        except OSError as e:
            print(f"tp_predict: {e}", file=sys.stderr)
            bad = 1
            continue
        flat = sorted(((k_4[k], k, k_1.get(k, 0.0)) for k in k_4 if k_4[k] > 0.5 * k_1.get(k, 0.0) and k_4[k] >= 1.0),
                      reverse=True)
        parts = ", ".join(f"{k} {u1:.0f} -> {u4:.0f} us" for u4, k, u1 in flat[:8]) or "none"
        notes.append(f"{name} batch 1, {k2} layers, TP1 -> TP4 per step: op kinds that do not halve: {parts}; "
                     f"launch / idle gap {g1 if g1 is not None else '?'} -> {g4 if g4 is not None else '?'} us, "
                     f"host {h1 if h1 is not None else '?'} -> {h4 if h4 is not None else '?'} us")
    if opts["--title"]:
        print(opts["--title"])
    print("| model | batch | TP1 ms/step | rank step TP2 | rank step TP4 | w/2 / w/4 ms | a ms | all-reduces/step "
          "| all-reduce us | TP2 ms (tok/s) | TP4 ms (tok/s) | fixed TP4 ms/step | per doubling TP1->2 / 2->4 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(r)
    print(f"(V100 x4, the team's measurement: fixed {V100_FIXED_MS} ms per token, "
          f"+{100 * V100_DOUBLING[0]:.0f} % / +{100 * V100_DOUBLING[1]:.0f} % per doubling)")
    for n in notes:
        print(n)
    return 1 if bad or not rows else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
