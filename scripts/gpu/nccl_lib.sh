# scripts/gpu/nccl_lib.sh — sourced (POSIX sh) by the GPU scripts: exports GANTRY_NCCL_LIB for
# comm_nccl's dlopen when the loader cannot find libnccl.so.2 (the pack does not carry it, 200+
# MB): a wheel of the machine's python3 (nvidia-nccl-cu*). Unchanged when already set.
if [ -z "${GANTRY_NCCL_LIB:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2 ' &&
   [ ! -e /usr/local/cuda/lib64/libnccl.so.2 ]; then
  lib=$(python3 -c 'import glob, site, sys
dirs = site.getsitepackages() + [site.getusersitepackages()] + sys.path
hits = [g for d in dirs for g in glob.glob(d + "/nvidia/*/lib/libnccl.so.2")]
print(hits[0] if hits else "")' 2>/dev/null)
  [ -n "$lib" ] && export GANTRY_NCCL_LIB=$lib
fi
