#!/usr/bin/env python3
"""tests/deploy/docker_runtime_deps.py BUILD_DIR — each Dockerfile whose runtime stage lists its
packages (docker/Dockerfile.router) must install every Debian package that owns a shared library
its copied binaries load: ldd of the same binaries built here (the host is the image's Debian
release), each library's owner from dpkg, and an owner is fine when the runtime stage installs
it, or when it is a dependency (recursively) of one it installs or of a `required` package of
the base image. A Dockerfile that derives its packages from ldd at build time
(docker/Dockerfile.engine) is checked for that step instead. Exit 77 without dpkg."""
import os
import re
import shutil
import subprocess
import sys

build = sys.argv[1]
src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if not shutil.which("dpkg-query") or not shutil.which("ldd"):
    print("no dpkg/ldd: skipped")
    sys.exit(77)


def sh(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True).stdout


installed = {}  # package -> (priority, depends)
for line in sh("dpkg-query", "-W", "-f", "${Package}\t${Priority}\t${Depends}\t${Pre-Depends}\n").splitlines():
    name, prio, dep, pre = (line.split("\t") + ["", "", ""])[:4]
    deps = set()
    for alt in (dep + "," + pre).split(","):
        for d in alt.split("|")[:1]:
            d = re.sub(r"\(.*?\)|:any|\[.*?\]", "", d).strip()
            if d:
                deps.add(d)
    installed[name] = (prio, deps)


def closure(pkgs):
    seen, todo = set(), list(pkgs)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        todo.extend(installed.get(p, ("", set()))[1])
    return seen


def owners(libs):
    """Owning package of each library path (dpkg -S, batched; also its real path and the
    /usr-merged twin); missing when no package owns it (e.g. the CUDA toolkit's)."""
    out = {}
    for variant in (lambda l: l, os.path.realpath, lambda l: l[4:] if l.startswith("/usr/") else "/usr" + l):
        todo = {variant(l): l for l in libs if l not in out}
        if not todo:
            break
        for line in sh("dpkg", "-S", *todo).splitlines():
            pkgs, _, path = line.partition(": ")
            if path in todo:
                out[todo[path]] = pkgs.split(",")[0].split(":")[0].strip()
    return out


status = 0
for df in sorted(os.listdir(os.path.join(src, "docker"))):
    if not df.startswith("Dockerfile"):
        continue
    text = open(os.path.join(src, "docker", df)).read()
    stages = re.split(r"(?m)^FROM ", text)
    runtime = stages[-1]
    if "runtime-packages" in runtime:
        ok = "ldd" in text and "dpkg -S" in text
        print(("ok" if ok else "FAIL") + f": {df} derives its runtime packages from ldd at build time")
        status |= 0 if ok else 1
        continue
    m = re.search(r"apt-get install[^\n]*?((?:\\\n|[^\n&])*)", runtime)
    listed = set(w for w in re.findall(r"[a-z0-9][a-z0-9.+-]+", m.group(1) if m else "") if w not in ("y", "no", "install", "recommends"))
    allowed = closure(listed | {p for p, (prio, _) in installed.items() if prio == "required"})
    bins = re.findall(r"COPY --from=build ([^\n]+) /usr/local/bin/", runtime)
    names = [os.path.basename(b) for line in bins for b in line.split()]
    for name in names:
        path = os.path.join(build, name)
        if not os.path.exists(path):
            print(f"FAIL: {df}: {name} is not built in {build}")
            status = 1
            continue
        libs = []
        for line in sh("ldd", path).splitlines():
            mm = re.search(r"=>\s*(/\S+)", line) or re.match(r"\s*(/\S+)", line)
            if mm:
                libs.append(mm.group(1))
        if any("libasan" in l or "libubsan" in l for l in libs):
            print(f"{name}: a sanitizer build, not what the image ships: skipped")
            sys.exit(77)
        missing = {}
        for lib, pkg in owners(libs).items():
            if pkg not in allowed:
                missing.setdefault(pkg, os.path.basename(lib))
        if missing:
            status = 1
            print(f"FAIL: {df}: {name} loads libraries of packages the image does not install: " +
                  ", ".join(f"{p} ({lib})" for p, lib in sorted(missing.items())))
        else:
            print(f"ok: {df}: {name}")
sys.exit(status)
