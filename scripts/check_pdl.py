#!/usr/bin/env python3
"""Checks the programmatic-dependent-launch contract of kernels/common.cuh (kc_launch):
every kernel launched through kc_launch (or kc_launch_cluster, kernels/common.cuh: kc_launch's
attribute together with a cluster) calls kc_pdl_wait() in its body before any `return`,
and kernels/ launches nothing with <<<...>>> except in the files listed in PLAIN (their kernels
must not start early: the device-local all-reduce spins on its peers). Prints each breach and
exits 1 if there is one. `--self-test` runs the checker on built-in good and bad sources first.
Usage: scripts/check_pdl.py [repo root] [--self-test]"""
import glob
import os
import re
import sys

PLAIN = {"allreduce_local.cu"}
LAUNCH = r"\b(?:kc_launch|kc_launch_cluster)\(\s*(\w+)"  # the launchers that may give the PDL attribute


def bodies(src):
    """{kernel name: body text} of the __global__ functions in src."""
    out = {}
    for m in re.finditer(r"__global__", src):
        i = m.end()
        lb = re.match(r"\s*void\s+__launch_bounds__\s*\(", src[i:])
        if lb:  # skip __launch_bounds__(...)
            d, j = 0, i + lb.end() - 1
            while True:
                d += src[j] == "("
                d -= src[j] == ")"
                j += 1
                if d == 0:
                    break
            i = j
        nm = re.search(r"(\w+)\s*\(", src[i:])
        name, j = nm.group(1), i + nm.end() - 1
        d = 0
        while True:  # parameter list
            d += src[j] == "("
            d -= src[j] == ")"
            j += 1
            if d == 0:
                break
        b = src.index("{", j)
        d, k = 0, b
        while True:
            d += src[k] == "{"
            d -= src[k] == "}"
            k += 1
            if d == 0:
                break
        out[name] = src[b:k]
    return out


def strip_comments(s):
    s = re.sub(r"/\*.*?\*/", " ", s, flags=re.S)
    return re.sub(r"//[^\n]*", " ", s)


def check(files):
    """files: {file name: text}; returns the list of breaches."""
    bad, defs, launched = [], {}, set()
    for f, s in files.items():
        defs.update(bodies(s))
        for m in re.finditer(LAUNCH, s):
            if m.group(1) != "void":  # the template's own declaration
                launched.add(m.group(1))
        if "<<<" in s and os.path.basename(f) not in PLAIN:
            bad.append(f"{f}: a <<<...>>> launch outside kc_launch")
    for k in sorted(launched):
        if k == "k":
            continue  # kc_launch's own parameter
        if k not in defs:
            bad.append(f"kernel {k}: launched by kc_launch but no __global__ definition found")
            continue
        body = defs[k]
        w = body.find("kc_pdl_wait()")
        r = re.search(r"\breturn\s*;", body)  # a kernel's own exit (lambdas return values)
        if w < 0 or (r and r.start() < w):
            bad.append(f"kernel {k}: launched by kc_launch without kc_pdl_wait() before any return")
    return bad


def self_test():
    good = {"a.cu": "__global__ void __launch_bounds__(32) g(int a) {\n kc_pdl_wait();\n if (a) return;\n}\n"
                    "int f() { return kc_launch(g, 1, 32, 0, 0, 1); }"}
    late = {"a.cu": "__global__ void g(int a) {\n auto f = [&]() { return 1; };\n if (a) return;\n kc_pdl_wait();\n}\n"
                    "int f() { return kc_launch(g, 1, 32, 0, 0, 1); }"}
    none = {"a.cu": "__global__ void g(int a) { a++; }\nint f() { return kc_launch(g, 1, 32, 0, 0, 1); }"}
    plain = {"a.cu": "__global__ void g(int a) { kc_pdl_wait(); }\nint f() { g<<<1, 32>>>(1); return 0; }"}
    cluster = {"a.cu": "__global__ void g(int a) { a++; }\nint f() { return kc_launch_cluster(g, 1, 32, 0, 0, 2, 1); }"}
    assert check(good) == [], check(good)
    for case in (late, none, plain, cluster):
        assert len(check(case)) == 1, (case, check(case))
    print("check_pdl self-test: ok")


def main():
    args = [a for a in sys.argv[1:] if a != "--self-test"]
    if "--self-test" in sys.argv:
        self_test()
    root = args[0] if args else os.path.join(os.path.dirname(__file__), "..")
    files = {}
    for p in sorted(glob.glob(os.path.join(root, "kernels", "*.cu")) + glob.glob(os.path.join(root, "kernels", "*.cuh"))):
        with open(p) as fh:
            files[os.path.relpath(p, root)] = strip_comments(fh.read())
    bad = check(files)
    for b in bad:
        print(b)
    n = len(set(re.findall(LAUNCH, "".join(files.values()))) - {"void", "k"})
    print(f"check_pdl: {n} kernels launched through kc_launch / kc_launch_cluster, {len(bad)} breaches")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
