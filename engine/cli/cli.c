#include "engine/cli/cli.h"

#include "engine/backend/comm.h"
#include "engine/models/tp.h"
#include "engine/sched/sched_mem.h"

#ifdef GANTRY_HAVE_CUDA
#include "engine/backend/backend_cuda.h"
#endif

#include <errno.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("gantry-engine: error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 1;
}

int cli_create_backend(const char *device, int threads, be_t **out) {
  gt_err_t err = {0};
  if (!device || !strcmp(device, "cpu")) {
    if (be_cpu_create(threads, out, &err)) return cli_fail("cpu backend: %s", err.msg);
    return 0;
  }
  if (!strncmp(device, "cuda", 4) && (device[4] == 0 || device[4] == ':')) {
    long n = 0;
    if (device[4] == ':' && cli_int("--device cuda:N", device + 5, 0, 63, &n)) return 1;
#ifdef GANTRY_HAVE_CUDA
    if (be_cuda_create((int)n, out, &err)) return cli_fail("%s: %s", device, err.msg);
    return 0;
#else
    return cli_fail("%s: this build has no CUDA backend (build where nvcc is installed)", device);
#endif
  }
  return cli_fail("--device must be cpu, cuda or cuda:N, got '%s'", device);
}

int cli_kv_dtype(be_t *be, const char *v) {
  if (!v) return 0;
  const gt_type_t t = !strcmp(v, "bf16") ? GT_TYPE_BF16 : !strcmp(v, "fp32") ? GT_TYPE_F32 : GT_TYPE_COUNT;
  if (t == GT_TYPE_COUNT) return cli_fail("--kv-dtype must be bf16 or fp32, got '%s'", v);
  if (be && be_kv_set_type(be, t)) return cli_fail("--kv-dtype %s: the %s backend cannot store it", v, be->ops->name);
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

/* --devices LIST: one CUDA ordinal per rank (n); the first into *first. Prints the error. */
static int parse_devices(const char *list, int n, int *first) {
  int count = 0;
  *first = -1;
  for (const char *p = list; *p;) {
    char *end;
    long d = strtol(p, &end, 10);
    if (end == p || d < 0 || d > 63 || (*end && *end != ','))
      return cli_fail("--devices expects CUDA ordinals like 0,1,2,3, got '%s'", list);
    if (*first < 0) *first = (int)d;
    count++;
    p = *end ? end + 1 : end;
  }
  return count == n ? 0 : cli_fail("--devices lists %d devices for --tp %d", count, n);
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
  if (tp_load(g, comm, tp_cpu_backend, &per_rank, max_tokens, m, be, &err)) {
    cli_fail("%s: %s", path, err.msg);
    return err.code == GT_ENOMEM ? 2 : 1;
  }
  /* test hook (tests/integration/test_engine_sigterm.c): "R:S" makes rank R fail on its
   * forward number S, to exercise the failure path of a whole process */
  const char *inj = getenv("GANTRY_TEST_TP_FAIL");
  int inj_rank, inj_step;
  if (inj && sscanf(inj, "%d:%d", &inj_rank, &inj_step) == 2) tp_fail_rank_at((*m)->tp, inj_rank, inj_step);
  return 0;
}

int cli_load_model(const gguf_t *g, const char *path, const char *device, int threads, const cli_tp_t *tp,
                   int max_tokens, uint64_t check_bytes, be_t **be, model_t **m) {
  gt_err_t err = {0};
  *be = NULL;
  *m = NULL;
  const int n = tp && tp->tp > 1 ? (int)tp->tp : 1;
  const int cpu = !device || !strcmp(device, "cpu");
  char one_dev[32];
  if (tp && tp->devices) {
    if (cpu) return cli_fail("--devices names CUDA devices; the CPU ranks need none");
    int first;
    if (parse_devices(tp->devices, n, &first)) return 1;
    if (n == 1) { /* one rank: the plain CUDA backend on that device */
      snprintf(one_dev, sizeof one_dev, "cuda:%d", first);
      device = one_dev;
    }
  }
  if (n > 1 && !cpu) return cli_fail("tensor parallelism on CUDA needs the NCCL communicator (--tp %d on %s)", n, device);
  if (n > 1) return load_cpu_ranks(g, path, n, threads, max_tokens, check_bytes, be, m);
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
