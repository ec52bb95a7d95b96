#include "engine/cli/cli.h"

#include "common/log.h"
#include "engine/backend/comm.h"
#include "engine/models/tp.h"
#include "engine/sched/sched_mem.h"

#ifdef GANTRY_HAVE_CUDA
#include "engine/backend/backend_cuda.h"
#include "engine/backend/comm_nccl.h"
#ifdef GANTRY_HAVE_CUDA
#include "engine/backend/comm_local.h"
#endif
#endif

#include <errno.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The largest ordinal --device cuda:N and --devices accept: a bound on the number as written,
 * not a device count (the backend refuses an ordinal the machine lacks) and not a rank count
 * (--tp is bounded by TP_MAX_RANKS, engine/models/tp.h). */
#define CLI_CUDA_ORDINAL_MAX 63

int cli_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("gantry-engine: error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 1;
}

/* --device other than cpu: "cuda" (*ordinal -1) or "cuda:N" (*ordinal N). Prints the error and
 * returns non-zero for anything else. */
static int cuda_ordinal(const char *device, long *ordinal) {
  *ordinal = -1;
  if (strncmp(device, "cuda", 4) || (device[4] && device[4] != ':'))
    return cli_fail("--device must be cpu, cuda or cuda:N, got '%s'", device);
  return device[4] == ':' && cli_int("--device cuda:N", device + 5, 0, CLI_CUDA_ORDINAL_MAX, ordinal);
}

int cli_create_backend(const char *device, int threads, be_t **out) {
  gt_err_t err = {0};
  if (!device || !strcmp(device, "cpu")) {
    if (be_cpu_create(threads, out, &err)) return cli_fail("cpu backend: %s", err.msg);
    return 0;
  }
  long n;
  if (cuda_ordinal(device, &n)) return 1;
#ifdef GANTRY_HAVE_CUDA
  if (be_cuda_create(n < 0 ? 0 : (int)n, out, &err)) return cli_fail("%s: %s", device, err.msg);
  return 0;
#else
  return cli_fail("%s: this build has no CUDA backend (build where nvcc is installed)", device);
#endif
}

int cli_kv_dtype(be_t *be, const char *v) {
  if (!v) return 0;
  const gt_type_t t = !strcmp(v, "bf16") ? GT_TYPE_BF16 : !strcmp(v, "fp32") ? GT_TYPE_F32 : GT_TYPE_COUNT;
  if (t == GT_TYPE_COUNT) return cli_fail("--kv-dtype must be bf16 or fp32, got '%s'", v);
  if (be && be_kv_set_type(be, t)) return cli_fail("--kv-dtype %s: the %s backend cannot store it", v, be->ops->name);
  return 0;
}

int cli_activations(const char *v) {
  if (!v) return 0;
  if (strcmp(v, "bf16") && strcmp(v, "fp32")) return cli_fail("--activations must be bf16 or fp32, got '%s'", v);
#ifdef GANTRY_HAVE_CUDA
  be_cuda_set_activations(v);
#endif
  return 0;
}

int cli_prefill_precision(const char *v) {
  if (!v) return 0;
  if (strcmp(v, "exact") && strcmp(v, "fast")) return cli_fail("--prefill-precision must be exact or fast, got '%s'", v);
#ifdef GANTRY_HAVE_CUDA
  be_cuda_set_prefill_precision(v);
#endif
  return 0;
}

int cli_tp_opt(int c, const char *arg, cli_tp_t *t) {
  if (c == CLI_OPT_TP) return cli_int("--tp", arg, 1, TP_MAX_RANKS, &t->tp) ? -1 : 1;
  if (c == CLI_OPT_DEVICES) {
    t->devices = arg;
    return 1;
  }
  return 0;
}

/* --devices LIST: one CUDA ordinal per rank (n) into dev[0..n-1]. Prints the error. */
static int parse_devices(const char *list, int n, int *dev) {
  int count = 0;
  for (const char *p = list; *p;) {
    char *end;
    long d = strtol(p, &end, 10);
    if (end == p || d < 0 || d > CLI_CUDA_ORDINAL_MAX || (*end && *end != ','))
      return cli_fail("--devices expects CUDA ordinals like 0,1,2,3, got '%s'", list);
    if (count < TP_MAX_RANKS) dev[count] = (int)d;
    count++;
    p = *end ? end + 1 : end;
  }
  return count == n ? 0 : cli_fail("--devices lists %d devices for --tp %d", count, n);
}

/* test hook (tests/integration/test_engine_sigterm.c): GANTRY_TEST_TP_FAIL="R:S" makes rank R
 * fail on its forward number S, to exercise the failure path of a whole process */
static void tp_test_hook(model_t *m) {
  const char *inj = getenv("GANTRY_TEST_TP_FAIL");
  int inj_rank, inj_step;
  if (inj && sscanf(inj, "%d:%d", &inj_rank, &inj_step) == 2) tp_fail_rank_at(m->tp, inj_rank, inj_step);
}

/* tp_load over comm with ranks from mk(ud); prints the error (exit code 2: not enough memory). */
static int load_group(const gguf_t *g, const char *path, be_comm_t *comm, tp_backend_fn mk, void *ud, int max_tokens,
                      be_t **be, model_t **m) {
  gt_err_t err = {0};
  if (tp_load(g, comm, mk, ud, max_tokens, m, be, &err)) {
    cli_fail("%s: %s", path, err.msg);
    return err.code == GT_ENOMEM ? 2 : 1;
  }
  tp_test_hook(*m);
  return 0;
}

/* A group of n CPU ranks over one in-process communicator (threads split between them). */
static int load_cpu_ranks(const gguf_t *g, const char *path, int n, int threads, int max_tokens, uint64_t check_bytes,
                          be_t **be, model_t **m) {
  gt_err_t err = {0};
  if (check_bytes) { /* the ranks share the host: the same check as one CPU backend's */
    be_t *host;
    if (be_cpu_create(1, &host, &err)) return cli_fail("cpu backend: %s", err.msg);
    int rc = sched_mem_check_weights(host, check_bytes, &err);
    be_destroy(host);
    if (rc) return cli_fail("%s", err.msg), 2;
  }
  if (threads <= 0) threads = omp_get_max_threads();
  int per_rank = threads / n > 0 ? threads / n : 1;
  be_comm_t *comm;
  if (be_comm_cpu_create(n, &comm, &err)) return cli_fail("%s", err.msg);
  return load_group(g, path, comm, tp_cpu_backend, &per_rank, max_tokens, be, m);
}

#ifdef GANTRY_HAVE_CUDA
typedef struct {
  int dev[TP_MAX_RANKS];
  uint64_t check_bytes; /* per rank (its even share of the weights); 0: no check */
} cuda_ranks_t;

/* tp_backend_fn of CUDA ranks (on rank r's worker thread): rank r on device dev[r], its share of
 * the weights checked against that device's free memory. */
static int cuda_rank_backend(void *ud, int rank, be_comm_t *comm, be_t **out, gt_err_t *err) {
  const cuda_ranks_t *cr = ud;
  int rc = be_cuda_create_rank(cr->dev[rank], rank, comm, out, err);
  if (!rc && cr->check_bytes && (rc = sched_mem_check_weights(*out, cr->check_bytes, err))) {
    be_destroy(*out);
    *out = NULL;
  }
  return rc;
}
#endif

int cli_tp_device_mode(const int *dev, int n) {
  int same = 1, distinct = 1;
  for (int r = 1; r < n; r++) {
    if (dev[r] != dev[0]) same = 0;
    for (int q = 0; q < r; q++)
      if (dev[q] == dev[r]) distinct = 0;
  }
  return n > 1 && same ? 1 : distinct ? 0 : -1;
}

/* A group of n CUDA ranks, rank r on device dev[r]: over the NCCL communicator, or with every rank
 * on one GPU (--devices 0,0,...) over the device-local one (engine/backend/comm_local.h). */
static int load_cuda_ranks(const gguf_t *g, const char *path, int n, const int *dev, int max_tokens,
                           uint64_t check_bytes, be_t **be, model_t **m) {
#ifndef GANTRY_HAVE_CUDA
  (void)g, (void)path, (void)dev, (void)max_tokens, (void)check_bytes, (void)be, (void)m;
  return cli_fail("tensor parallelism on CUDA (--tp %d): this build has no CUDA backend (build where nvcc is installed)", n);
#else
  gt_err_t err = {0};
  if (cli_tp_device_mode(dev, n) == 1) {
    be_comm_t *comm;
    if (be_comm_local_create(dev[0], n, &comm, &err)) return cli_fail("tensor parallelism on CUDA: %s", err.msg);
    char what[256];
    GT_LOG_INFO("tp: %s", be_comm_local_describe(comm, what, sizeof what));
    /* every rank's share of the weights on the one GPU */
    cuda_ranks_t cr = {.check_bytes = check_bytes};
    memcpy(cr.dev, dev, sizeof(int) * (size_t)n);
    return load_group(g, path, comm, cuda_rank_backend, &cr, max_tokens, be, m);
  }
  if (nccl_comm_load(&err)) return cli_fail("tensor parallelism on CUDA (--tp %d) needs NCCL: %s", n, err.msg);
  const int visible = be_cuda_device_count();
  for (int r = 0; r < n; r++)
    if (dev[r] >= visible)
      return visible < n ? cli_fail("tensor parallelism on CUDA: --tp %d needs %d GPU%s, %d visible", n, n, n == 1 ? "" : "s", visible)
                         : cli_fail("tensor parallelism on CUDA: rank %d wants cuda:%d, %d GPUs visible", r, dev[r], visible);
  be_comm_t *comm;
  if (be_comm_nccl_create(dev, n, &comm, &err)) return cli_fail("tensor parallelism on CUDA: %s", err.msg);
  char what[256];
  GT_LOG_INFO("tp: %s", nccl_comm_describe(be_comm_nccl(comm), what, sizeof what));
  cuda_ranks_t cr = {.check_bytes = check_bytes ? (check_bytes + (uint64_t)n - 1) / (uint64_t)n : 0};
  memcpy(cr.dev, dev, sizeof(int) * (size_t)n);
  return load_group(g, path, comm, cuda_rank_backend, &cr, max_tokens, be, m);
#endif
}

int cli_load_model(const gguf_t *g, const char *path, const char *device, int threads, const cli_tp_t *tp,
                   int max_tokens, uint64_t check_bytes, be_t **be, model_t **m) {
  gt_err_t err = {0};
  *be = NULL;
  *m = NULL;
  const int n = tp && tp->tp > 1 ? (int)tp->tp : 1;
  const int cpu = !device || !strcmp(device, "cpu");
  /* GANTRY_TP_FORCE_GROUP=1: one rank too goes through the group and its communicator (the
   * NCCL path on one GPU: tests/gpu/test_cuda_tp.c, scripts/gpu/tp.sh) */
  const char *force_env = getenv("GANTRY_TP_FORCE_GROUP");
  const int group = n > 1 || (force_env && !strcmp(force_env, "1"));
  int dev[TP_MAX_RANKS];
  for (int r = 0; r < n; r++) dev[r] = r;
  char one_dev[32];
  if (tp && tp->devices) {
    if (cpu) return cli_fail("--devices names CUDA devices; the CPU ranks need none");
    if (parse_devices(tp->devices, n, dev)) return 1;
    const int mode = cli_tp_device_mode(dev, n);
    if (mode < 0)
      return cli_fail("--devices %s mixes shared and distinct GPUs: give every rank its own GPU (NCCL) or put all of "
                      "them on one (the device-local communicator, for tests and measurement)", tp->devices);
    /* ranks sharing a GPU: their streams on hardware queues of their own (read before CUDA starts) */
    if (mode == 1) setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    if (n == 1) { /* one rank: the plain CUDA backend on that device */
      snprintf(one_dev, sizeof one_dev, "cuda:%d", dev[0]);
      device = one_dev;
    }
  }
  if (group && !cpu) {
    long d0;
    if (cuda_ordinal(device, &d0)) return 1;
    if (n > 1 && d0 >= 0) return cli_fail("--device %s names one GPU; give the ranks' GPUs with --devices", device);
    if (d0 >= 0) dev[0] = (int)d0;
    return load_cuda_ranks(g, path, n, dev, max_tokens, check_bytes, be, m);
  }
  if (group) return load_cpu_ranks(g, path, n, threads, max_tokens, check_bytes, be, m);
  if (cli_create_backend(device, threads, be)) return 1;
  if (check_bytes && sched_mem_check_weights(*be, check_bytes, &err)) {
    be_destroy(*be);
    *be = NULL;
    cli_fail("%s", err.msg);
    return 2;
  }
  if (model_load(g, *be, max_tokens, m, &err)) {
    be_destroy(*be);
    *be = NULL;
    cli_fail("%s: %s", path, err.msg);
    return err.code == GT_ENOMEM ? 2 : 1;
  }
  return 0;
}

int cli_open_model(const char *path, const char *device, int threads, const cli_tp_t *tp, int max_tokens,
                   cli_model_t *out) {
  gt_err_t err = {0};
  memset(out, 0, sizeof *out);
  if (!path) return cli_fail("--model is required");
  if (gguf_open(path, &out->gguf, &err)) return cli_fail("%s", err.msg); /* names the file */
  if (cli_load_model(out->gguf, path, device, threads, tp, max_tokens, 0, &out->be, &out->model)) {
    cli_close_model(out);
    return 1;
  }
  return 0;
}

void cli_close_model(cli_model_t *m) {
  model_free(m->model);
  be_destroy(m->be);
  gguf_close(m->gguf);
  memset(m, 0, sizeof *m);
}

int cli_int(const char *opt, const char *v, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long x = strtol(v ? v : "", &end, 10);
  if (!v || !*v || *end || errno || x < lo || x > hi) {
    cli_fail("%s expects an integer in [%ld, %ld], got '%s'", opt, lo, hi, v ? v : "");
    return -1;
  }
  *out = x;
  return 0;
}

int cli_on_off(const char *opt, const char *v, int *out) {
  if (!v || (strcmp(v, "on") && strcmp(v, "off"))) {
    cli_fail("%s must be on or off, not '%s'", opt, v ? v : "");
    return -1;
  }
  *out = !strcmp(v, "on");
  return 0;
}

int cli_float(const char *opt, const char *v, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double x = strtod(v ? v : "", &end);
  if (!v || !*v || *end || errno || !(x >= lo && x <= hi)) {
    cli_fail("%s expects a number in [%g, %g], got '%s'", opt, lo, hi, v ? v : "");
    return -1;
  }
  *out = x;
  return 0;
}

int cli_parse_ids(const char *s, int32_t **ids) {
  size_t cap = 16, n = 0;
  int32_t *v = malloc(cap * sizeof *v);
  const char *p = s;
  while (v && *p) {
    char *end;
    errno = 0;
    long x = strtol(p, &end, 10);
    if (end == p || errno || x < 0 || x > INT32_MAX) {
      free(v);
      cli_fail("bad token id list near '%.20s'", p);
      return -1;
    }
    if (n == cap) v = realloc(v, (cap *= 2) * sizeof *v);
    if (v) v[n++] = (int32_t)x;
    p = end;
    while (*p == ',' || *p == ' ' || *p == '\n' || *p == '\t') p++;
  }
  if (!v) return cli_fail("out of memory"), -1;
  *ids = v;
  return (int)n;
}
