/* clients/bench_run.h — streamed requests over libcurl's multi interface.
 * Closed loop: exactly `concurrency` streams in flight until n_total have been sent (a finished
 * stream is replaced at once). Open loop (rate > 0): Poisson arrivals at `rate` requests/s,
 * however many are in flight. */
#ifndef GANTRY_CLIENTS_BENCH_RUN_H
#define GANTRY_CLIENTS_BENCH_RUN_H

#include <stdint.h>

#include "clients/http.h"
#include "clients/req.h"
#include "common/err.h"

/* Returns the malloc'd JSON body of request idx (the runner frees it), NULL on failure. */
typedef char *(*gc_body_fn)(void *ud, int idx);
/* Progress: `done` of `total` requests finished. */
typedef void (*gc_progress_fn)(void *ud, int done, int total);

typedef struct gc_run_opts {
  const gc_http_t *http;
  const char *path;     /* "/v1/chat/completions" */
  int concurrency;      /* closed loop: streams in flight (>= 1) */
  double rate;          /* > 0: open loop, requests per second (Poisson) */
  uint64_t seed;        /* for the arrival process */
  int n_total;
  gc_body_fn body;
  void *body_ud;
  gc_progress_fn progress; /* optional */
  void *progress_ud;
} gc_run_opts_t;

/* Runs o->n_total requests; request i is measured into reqs[i] (the caller's array; keep_text
 * and on_delta set there are honoured; gc_req_begin/finish are called here; the caller frees
 * with gc_req_free). *wall_s is the time from the first start to the last finish. Per-request
 * failures land in reqs[i].error; the return value is an error only when the run itself could
 * not proceed (bad options, OOM, curl multi failure). */
int gc_run(const gc_run_opts_t *o, gc_req_t *reqs, double *wall_s, gt_err_t *err);

/* One streamed POST of a fixed JSON body to path, measured into r (as gc_run does). */
int gc_run_one(const gc_http_t *h, const char *path, const char *body, gc_req_t *r, gt_err_t *err);

#endif
