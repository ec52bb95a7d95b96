/* engine/backend/comm_nccl.c — NCCL communicator: one process, N GPUs (comm_nccl.h).
 * With GANTRY_HAVE_NCCL (nccl.h found at build time) libnccl is loaded with dlopen on first use;
 * without it every entry point fails with "built without NCCL". */
#define _GNU_SOURCE
#include "engine/backend/comm_nccl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *nccl_comm_method_name(nccl_comm_method_t m) {
  return m == NCCL_COMM_SYMMETRIC ? "symmetric" : m == NCCL_COMM_PLAIN ? "plain" : "?";
}

#ifdef GANTRY_HAVE_NCCL

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdatomic.h>

#define NCCL_COMM_MAX_RANKS 16

/* ---- libnccl, loaded once (a failed load is retried on the next init) ---- */

typedef struct {
  void *h;
  char path[512];
  int version;
  __typeof__(ncclGetErrorString) *GetErrorString;
  __typeof__(ncclGetLastError) *GetLastError;
  __typeof__(ncclCommInitAll) *CommInitAll;
  __typeof__(ncclCommDestroy) *CommDestroy;
  __typeof__(ncclCommAbort) *CommAbort;
  __typeof__(ncclCommRevoke) *CommRevoke; /* NULL before NCCL 2.28 */
  __typeof__(ncclAllReduce) *AllReduce;
  __typeof__(ncclGroupStart) *GroupStart;
  __typeof__(ncclGroupEnd) *GroupEnd;
  /* NULL when the loaded library predates them (symmetric method unsupported) */
  __typeof__(ncclMemAlloc) *MemAlloc;
  __typeof__(ncclMemFree) *MemFree;
  __typeof__(ncclCommWindowRegister) *WinRegister;
  __typeof__(ncclCommWindowDeregister) *WinDeregister;
} nccl_lib_t;

static nccl_lib_t lib;
static pthread_mutex_t lib_mu = PTHREAD_MUTEX_INITIALIZER;

#ifndef GANTRY_NCCL_LIB_DEFAULT
#define GANTRY_NCCL_LIB_DEFAULT ""
#endif

static int lib_try(const char *path, char *why, size_t cap) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(why, cap, "%s", e ? e : path);
    return -1;
  }
  nccl_lib_t l = {.h = h};
  snprintf(l.path, sizeof l.path, "%s", path);
  __typeof__(ncclGetVersion) *get_version = (__typeof__(ncclGetVersion) *)dlsym(h, "ncclGetVersion");
#define SYM(field, name) l.field = (__typeof__(l.field))dlsym(h, name)
  SYM(GetErrorString, "ncclGetErrorString");
  SYM(GetLastError, "ncclGetLastError");
  SYM(CommInitAll, "ncclCommInitAll");
  SYM(CommDestroy, "ncclCommDestroy");
  SYM(CommAbort, "ncclCommAbort");
  SYM(CommRevoke, "ncclCommRevoke");
  SYM(AllReduce, "ncclAllReduce");
  SYM(GroupStart, "ncclGroupStart");
  SYM(GroupEnd, "ncclGroupEnd");
  SYM(MemAlloc, "ncclMemAlloc");
  SYM(MemFree, "ncclMemFree");
  SYM(WinRegister, "ncclCommWindowRegister");
  SYM(WinDeregister, "ncclCommWindowDeregister");
#undef SYM
  if (!get_version || !l.GetErrorString || !l.CommInitAll || !l.CommDestroy || !l.CommAbort || !l.AllReduce || !l.GroupStart ||
      !l.GroupEnd || get_version(&l.version) != ncclSuccess) {
    snprintf(why, cap, "%s is not a usable libnccl (missing symbols)", path);
    dlclose(h);
    return -1;
  }
  if (!l.MemAlloc || !l.MemFree || !l.WinRegister || !l.WinDeregister)
    l.MemAlloc = NULL, l.MemFree = NULL, l.WinRegister = NULL, l.WinDeregister = NULL;
  lib = l;
  return 0;
}

/* Loads libnccl: $GANTRY_NCCL_LIB only when set, else "libnccl.so.2" through the loader's path,
 * else the library CMake found at build time. */
static int lib_load(gt_err_t *err) {
  pthread_mutex_lock(&lib_mu);
  int rc = GT_OK;
  if (!lib.h) {
    /* NVLS off unless the operator chose otherwise: set before NCCL is loaded and reads it */
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    char why[512] = "", why2[512] = "";
    const char *env = getenv("GANTRY_NCCL_LIB");
    if (env && *env) {
      if (lib_try(env, why, sizeof why))
        rc = gt_err_set(err, GT_EUNSUPPORTED, "nccl: cannot load NCCL from GANTRY_NCCL_LIB: %s", why);
    } else if (lib_try("libnccl.so.2", why, sizeof why) &&
               (!*GANTRY_NCCL_LIB_DEFAULT || lib_try(GANTRY_NCCL_LIB_DEFAULT, why2, sizeof why2))) {
      rc = gt_err_set(err, GT_EUNSUPPORTED,
                      "nccl: cannot load NCCL (%s%s%s): put libnccl.so.2 on LD_LIBRARY_PATH or set GANTRY_NCCL_LIB", why,
                      *why2 ? "; " : "", why2);
    }
  }
  pthread_mutex_unlock(&lib_mu);
  return rc;
}

/* ---- the clique ---- */

typedef struct comm_buf {
  nccl_comm_method_t method;
  void *ptr[NCCL_COMM_MAX_RANKS];
  ncclWindow_t win[NCCL_COMM_MAX_RANKS]; /* symmetric only */
  struct comm_buf *next;
} comm_buf_t;

struct nccl_comm {
  int n;
  int dev[NCCL_COMM_MAX_RANKS];
  ncclComm_t comm[NCCL_COMM_MAX_RANKS];
  pthread_mutex_t mu; /* guards bufs */
  comm_buf_t *bufs;
  atomic_int aborted; /* nccl_comm_abort was called */
};

static int nccl_fail(gt_err_t *err, ncclResult_t r, ncclComm_t comm, const char *what) {
  const char *last = lib.GetLastError ? lib.GetLastError(comm) : NULL;
  return gt_err_set(err, GT_EINTERNAL, "%s: %s%s%s", what, lib.GetErrorString(r), last && *last ? ": " : "",
                    last ? last : "");
}

static int cuda_fail(gt_err_t *err, cudaError_t e, const char *what) {
  (void)cudaGetLastError();
  return gt_err_set(err, e == cudaErrorMemoryAllocation ? GT_ENOMEM : GT_EINTERNAL, "%s: %s", what,
                    cudaGetErrorString(e));
}

int nccl_comm_size(const nccl_comm_t *c) { return c ? c->n : 0; }

int nccl_comm_device(const nccl_comm_t *c, int rank) { return c && rank >= 0 && rank < c->n ? c->dev[rank] : -1; }

const char *nccl_comm_describe(const nccl_comm_t *c, char *buf, size_t cap) {
  const char *nvls = getenv("NCCL_NVLS_ENABLE");
  int v = lib.version;
  /* codes since 2.9: major*10000 + minor*100 + patch */
  snprintf(buf, cap, "NCCL %d.%d.%d (%s), %d rank%s, NVLS %s, symmetric windows %s, revoke %s", v / 10000,
           v / 100 % 100, v % 100, lib.path, nccl_comm_size(c), nccl_comm_size(c) == 1 ? "" : "s",
           nvls && !strcmp(nvls, "0") ? "off" : nvls ? nvls : "default", lib.WinRegister ? "available" : "unavailable",
           lib.CommRevoke ? "available" : "unavailable");
  return buf;
}

int nccl_comm_load(gt_err_t *err) { return lib_load(err); }

int nccl_comm_init_all(const int *devices, int n, nccl_comm_t **out, gt_err_t *err) {
  *out = NULL;
  if (n < 1 || n > NCCL_COMM_MAX_RANKS)
    return gt_err_set(err, GT_EINVAL, "nccl: %d ranks (1..%d)", n, NCCL_COMM_MAX_RANKS);
  int dev[NCCL_COMM_MAX_RANKS];
  for (int r = 0; r < n; r++) {
    dev[r] = devices ? devices[r] : r;
    if (dev[r] < 0) return gt_err_set(err, GT_EINVAL, "nccl: rank %d: device %d", r, dev[r]);
    for (int q = 0; q < r; q++)
      if (dev[q] == dev[r]) return gt_err_set(err, GT_EINVAL, "nccl: device %d given to ranks %d and %d", dev[r], q, r);
  }
  int rc = lib_load(err);
  if (rc) return rc;
  int count = 0;
  cudaError_t ce = cudaGetDeviceCount(&count);
  if (ce != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return gt_err_set(err, GT_EUNSUPPORTED, "nccl: no CUDA device visible (%s)",
                      ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
  }
  for (int r = 0; r < n; r++)
    if (dev[r] >= count)
      return gt_err_set(err, GT_EUNSUPPORTED, "nccl: rank %d wants device %d, %d visible", r, dev[r], count);
  nccl_comm_t *c = calloc(1, sizeof *c);
  if (!c) return gt_err_set(err, GT_ENOMEM, "nccl: out of memory");
  c->n = n;
  memcpy(c->dev, dev, sizeof(int) * (size_t)n);
  pthread_mutex_init(&c->mu, NULL);
  int cur = 0;
  (void)cudaGetDevice(&cur);
  ncclResult_t r = lib.CommInitAll(c->comm, n, c->dev);
  (void)cudaSetDevice(cur);
  if (r != ncclSuccess) {
    rc = nccl_fail(err, r, NULL, "ncclCommInitAll");
    pthread_mutex_destroy(&c->mu);
    free(c);
    return rc;
  }
  *out = c;
  return GT_OK;
}

/* Deregisters (windows collectively, in a group; not on an aborted clique, whose windows went
 * with ncclCommAbort) and frees one set; ptr[] entries may be NULL. */
static void buf_release(nccl_comm_t *c, comm_buf_t *b) {
  int cur = 0;
  (void)cudaGetDevice(&cur);
  if (b->method == NCCL_COMM_SYMMETRIC && !atomic_load(&c->aborted)) {
    lib.GroupStart();
    for (int r = 0; r < c->n; r++)
      if (b->win[r]) lib.WinDeregister(c->comm[r], b->win[r]);
    lib.GroupEnd();
  }
  for (int r = 0; r < c->n; r++) {
    if (!b->ptr[r]) continue;
    (void)cudaSetDevice(c->dev[r]);
    if (b->method == NCCL_COMM_SYMMETRIC) lib.MemFree(b->ptr[r]);
    else (void)cudaFree(b->ptr[r]);
  }
  (void)cudaSetDevice(cur);
  free(b);
}

int nccl_comm_buffers_alloc(nccl_comm_t *c, size_t bytes, nccl_comm_method_t m, void **ptrs, gt_err_t *err) {
  for (int r = 0; r < c->n; r++) ptrs[r] = NULL;
  if (bytes == 0) return gt_err_set(err, GT_EINVAL, "nccl: empty buffer");
  if (m != NCCL_COMM_PLAIN && m != NCCL_COMM_SYMMETRIC) return gt_err_set(err, GT_EINVAL, "nccl: method %d", (int)m);
  if (m == NCCL_COMM_SYMMETRIC && !lib.WinRegister)
    return gt_err_set(err, GT_EUNSUPPORTED, "nccl: %s has no symmetric windows (NCCL >= 2.27 needed, loaded %d)",
                      lib.path, lib.version);
  comm_buf_t *b = calloc(1, sizeof *b);
  if (!b) return gt_err_set(err, GT_ENOMEM, "nccl: out of memory");
  b->method = m;
  /* windows are registered in whole pages */
  size_t sz = (bytes + NCCL_WIN_REQUIRED_ALIGNMENT - 1) / NCCL_WIN_REQUIRED_ALIGNMENT * NCCL_WIN_REQUIRED_ALIGNMENT;
  int cur = 0, rc = GT_OK;
  (void)cudaGetDevice(&cur);
  for (int r = 0; r < c->n && !rc; r++) {
    cudaError_t ce = cudaSetDevice(c->dev[r]);
    if (ce != cudaSuccess) {
      rc = cuda_fail(err, ce, "nccl: cudaSetDevice");
    } else if (m == NCCL_COMM_SYMMETRIC) {
      ncclResult_t nr = lib.MemAlloc(&b->ptr[r], sz);
      if (nr != ncclSuccess) rc = nccl_fail(err, nr, c->comm[r], "ncclMemAlloc"), b->ptr[r] = NULL;
    } else if ((ce = cudaMalloc(&b->ptr[r], sz)) != cudaSuccess) {
      rc = cuda_fail(err, ce, "nccl: cudaMalloc"), b->ptr[r] = NULL;
    }
  }
  (void)cudaSetDevice(cur);
  if (!rc && m == NCCL_COMM_SYMMETRIC) {
    ncclResult_t nr = lib.GroupStart();
    for (int r = 0; r < c->n && nr == ncclSuccess; r++)
      nr = lib.WinRegister(c->comm[r], b->ptr[r], sz, &b->win[r], NCCL_WIN_COLL_SYMMETRIC);
    ncclResult_t ne = lib.GroupEnd();
    if (nr == ncclSuccess) nr = ne;
    if (nr != ncclSuccess) {
      rc = nccl_fail(err, nr, c->comm[0], "ncclCommWindowRegister");
      memset(b->win, 0, sizeof b->win); /* a failed group leaves no usable handle */
    }
  }
  if (rc) {
    buf_release(c, b);
    return rc;
  }
  pthread_mutex_lock(&c->mu);
  b->next = c->bufs;
  c->bufs = b;
  pthread_mutex_unlock(&c->mu);
  memcpy(ptrs, b->ptr, sizeof(void *) * (size_t)c->n);
  return GT_OK;
}

void nccl_comm_buffers_free(nccl_comm_t *c, void **ptrs) {
  if (!c || !ptrs) return;
  pthread_mutex_lock(&c->mu);
  comm_buf_t **pp = &c->bufs;
  while (*pp && (*pp)->ptr[0] != ptrs[0]) pp = &(*pp)->next;
  comm_buf_t *b = *pp;
  if (b) *pp = b->next;
  pthread_mutex_unlock(&c->mu);
  if (b) buf_release(c, b);
  for (int r = 0; r < c->n; r++) ptrs[r] = NULL;
}

int nccl_comm_all_reduce(nccl_comm_t *c, int rank, void *ptr, size_t count, gt_type_t dtype, void *stream,
                         gt_err_t *err) {
  if (!c || rank < 0 || rank >= c->n) return gt_err_set(err, GT_EINVAL, "nccl: rank %d of %d", rank, nccl_comm_size(c));
  if (atomic_load(&c->aborted)) return gt_err_set(err, GT_ECANCELLED, "nccl: communicator aborted");
  ncclDataType_t t;
  if (dtype == GT_TYPE_F32) t = ncclFloat32;
  else if (dtype == GT_TYPE_BF16) t = ncclBfloat16;
  else return gt_err_set(err, GT_EINVAL, "nccl: all-reduce of dtype %d (f32 or bf16)", (int)dtype);
  ncclResult_t r = lib.AllReduce(ptr, ptr, count, t, ncclSum, c->comm[rank], (cudaStream_t)stream);
  if (r != ncclSuccess && atomic_load(&c->aborted)) /* revoked while this call was entering NCCL */
    return gt_err_set(err, GT_ECANCELLED, "nccl: communicator aborted");
  return r == ncclSuccess ? GT_OK : nccl_fail(err, r, c->comm[rank], "ncclAllReduce");
}

int nccl_comm_abort(nccl_comm_t *c) {
  if (!c) return GT_OK;
  if (atomic_exchange(&c->aborted, 1)) return lib.CommRevoke ? GT_OK : GT_EUNSUPPORTED;
  if (!lib.CommRevoke) return GT_EUNSUPPORTED;
  for (int r = 0; r < c->n; r++) lib.CommRevoke(c->comm[r], 0);
  return GT_OK;
}

void nccl_comm_destroy(nccl_comm_t *c) {
  if (!c) return;
  const int aborted = atomic_load(&c->aborted);
  int cur = 0;
  (void)cudaGetDevice(&cur);
  /* a healthy clique finishes its queued work first; an aborted one may never finish it */
  for (int r = 0; r < c->n && !aborted; r++)
    if (cudaSetDevice(c->dev[r]) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) (void)cudaGetLastError();
  (void)cudaSetDevice(cur);
  if (aborted)
    for (int r = 0; r < c->n; r++) lib.CommAbort(c->comm[r]); /* stops what still runs on the devices */
  while (c->bufs) {
    comm_buf_t *b = c->bufs;
    c->bufs = b->next;
    buf_release(c, b);
  }
  if (!aborted)
    for (int r = 0; r < c->n; r++) lib.CommDestroy(c->comm[r]);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

#else /* !GANTRY_HAVE_NCCL */

#define NO_NCCL(err) gt_err_set(err, GT_EUNSUPPORTED, "nccl: built without NCCL (nccl.h was not found at build time)")

int nccl_comm_load(gt_err_t *err) { return NO_NCCL(err); }

int nccl_comm_init_all(const int *devices, int n, nccl_comm_t **out, gt_err_t *err) {
  *out = NULL;
  return NO_NCCL(err);
}

int nccl_comm_size(const nccl_comm_t *c) { return 0; }

int nccl_comm_device(const nccl_comm_t *c, int rank) { return -1; }

const char *nccl_comm_describe(const nccl_comm_t *c, char *buf, size_t cap) {
  snprintf(buf, cap, "built without NCCL");
  return buf;
}

int nccl_comm_buffers_alloc(nccl_comm_t *c, size_t bytes, nccl_comm_method_t m, void **ptrs, gt_err_t *err) {
  return NO_NCCL(err);
}

void nccl_comm_buffers_free(nccl_comm_t *c, void **ptrs) {}

int nccl_comm_all_reduce(nccl_comm_t *c, int rank, void *ptr, size_t count, gt_type_t dtype, void *stream,
                         gt_err_t *err) {
  return NO_NCCL(err);
}

int nccl_comm_abort(nccl_comm_t *c) { return GT_OK; }

void nccl_comm_destroy(nccl_comm_t *c) {}

#endif
