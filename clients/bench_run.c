/* clients/bench_run.c — closed-loop / Poisson runner on curl multi; stamps each SSE event with
 * the monotonic time its bytes arrived. */
#include "clients/bench_run.h"

#include <curl/curl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "clients/sse.h"
#include "common/clock.h"

typedef struct xfer {
  CURL *h;
  struct curl_slist *hdrs;
  char *body;
  gc_sse_t sse;
  gc_req_t *req;
  int64_t now; /* arrival time of the bytes being fed */
  int status_known;
  char ebuf[CURL_ERROR_SIZE];
} xfer_t;

static int on_event(void *ud, const char *data, size_t len) {
  xfer_t *x = ud;
  gc_req_on_event(x->req, data, len, x->now);
  return 0;
}

static size_t on_write(char *p, size_t sz, size_t nm, void *ud) {
  xfer_t *x = ud;
  size_t n = sz * nm;
  x->now = gt_now_ns();
  gc_req_t *r = x->req;
  if (!x->status_known) {
    curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &r->http_status);
    x->status_known = 1;
  }
  if (r->http_status >= 300) { /* error body: keep it for the message (first 64 KiB) */
    if (r->body_len < 65536) {
      char *nb = realloc(r->body, r->body_len + n + 1);
      if (!nb) return 0;
      memcpy(nb + r->body_len, p, n);
      r->body_len += n;
      nb[r->body_len] = 0;
      r->body = nb;
    }
    return n;
  }
  if (gc_sse_feed(&x->sse, p, n) == GT_ENOMEM) return 0;
  return n;
}

static void xfer_free(xfer_t *x) {
  if (!x) return;
  if (x->h) curl_easy_cleanup(x->h);
  curl_slist_free_all(x->hdrs);
  free(x->body);
  gc_sse_free(&x->sse);
  free(x);
}

static xfer_t *xfer_new(const gc_run_opts_t *o, const char *url, gc_req_t *r, int idx) {
  xfer_t *x = calloc(1, sizeof *x);
  if (!x) return NULL;
  x->req = r;
  x->body = o->body(o->body_ud, idx);
  x->h = curl_easy_init();
  x->hdrs = gc_http_headers(o->http, 1, 1);
  if (!x->body || !x->h || !x->hdrs) {
    xfer_free(x);
    return NULL;
  }
  gc_sse_init(&x->sse, on_event, x);
  CURL *h = x->h;
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, x->hdrs);
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, x->body);
  curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(x->body));
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
  curl_easy_setopt(h, CURLOPT_PRIVATE, x);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, x->ebuf);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
  if (o->http->timeout_ms > 0) curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, o->http->timeout_ms);
  return x;
}

/* xorshift64* uniform in (0,1) */
static double urand(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return ((double)((*s * 2685821657736338717ULL) >> 11) + 0.5) / 9007199254740992.0;
}

int gc_run(const gc_run_opts_t *o, gc_req_t *reqs, double *wall_s, gt_err_t *err) {
  *wall_s = 0;
  if (!o || !o->http || !o->path || !o->body || o->n_total < 0 || (o->rate <= 0 && o->concurrency < 1))
    return gt_err_set(err, GT_EINVAL, "gc_run: bad options (concurrency %d, rate %g)",
                      o ? o->concurrency : 0, o ? o->rate : 0.0);
  if (o->n_total == 0) return GT_OK;
  char *url = gc_http_url(o->http, o->path);
  CURLM *m = curl_multi_init();
  xfer_t **live = calloc((size_t)o->n_total, sizeof *live); /* in-flight transfer of request i */
  if (!url || !m || !live) {
    free(url);
    free(live);
    if (m) curl_multi_cleanup(m);
    return gt_err_set(err, GT_ENOMEM, "gc_run: out of memory");
  }
  int started = 0, finished = 0, inflight = 0, ret = GT_OK;
  uint64_t rng = o->seed ? o->seed : 0x9E3779B97F4A7C15ULL;
  int64_t t0 = gt_now_ns(), t_last = t0, next_arrival = t0;
  while (finished < o->n_total) {
    /* start what the loop discipline allows now */
    int64_t now = gt_now_ns();
    while (started < o->n_total &&
           (o->rate > 0 ? now >= next_arrival : inflight < o->concurrency)) {
      gc_req_t *r = &reqs[started];
      gc_req_begin(r, gt_now_ns());
      xfer_t *x = xfer_new(o, url, r, started);
      if (!x) {
        ret = gt_err_set(err, GT_ENOMEM, "gc_run: cannot set up request %d (body or curl handle)", started);
        goto out;
      }
      r->t_start_ns = gt_now_ns();
      if (curl_multi_add_handle(m, x->h) != CURLM_OK) {
        xfer_free(x);
        ret = gt_err_set(err, GT_EINTERNAL, "gc_run: curl_multi_add_handle failed");
        goto out;
      }
      live[started] = x;
      started++;
      inflight++;
      if (o->rate > 0) next_arrival += (int64_t)(-log(urand(&rng)) / o->rate * 1e9);
    }
    int running = 0;
    CURLMcode mc = curl_multi_perform(m, &running);
    if (mc != CURLM_OK) {
      ret = gt_err_set(err, GT_EIO, "gc_run: curl_multi_perform: %s", curl_multi_strerror(mc));
      goto out;
    }
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(m, &left))) {
      if (msg->msg != CURLMSG_DONE) continue;
      xfer_t *x;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
      int64_t t = gt_now_ns();
      gc_req_t *r = x->req;
      if (!x->status_known) curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &r->http_status);
      if (msg->data.result != CURLE_OK)
        gc_req_set_error(r, "transport: %s", x->ebuf[0] ? x->ebuf : curl_easy_strerror(msg->data.result));
      else if (r->http_status < 300)
        gc_sse_finish(&x->sse);
      gc_req_finish(r, t);
      curl_multi_remove_handle(m, x->h);
      live[r - reqs] = NULL;
      xfer_free(x);
      inflight--;
      finished++;
      t_last = t;
      if (o->progress) o->progress(o->progress_ud, finished, o->n_total);
    }
    if (finished >= o->n_total) break;
    int wait_ms = 1000;
    if (o->rate > 0 && started < o->n_total) {
      int64_t d = next_arrival - gt_now_ns();
      wait_ms = d <= 0 ? 0 : (int)(d / 1000000) + 1;
      if (wait_ms > 1000) wait_ms = 1000;
    }
    if (started < o->n_total && o->rate <= 0 && inflight < o->concurrency) wait_ms = 0;
    if (wait_ms > 0) curl_multi_poll(m, NULL, 0, wait_ms, NULL);
  }
out:
  /* on a setup failure, abandon whatever is still in flight */
  if (ret != GT_OK) {
    for (int i = 0; live && i < o->n_total; i++) {
      xfer_t *x = live[i];
      if (!x) continue;
      curl_multi_remove_handle(m, x->h);
      gc_req_set_error(x->req, "abandoned: %s", err ? err->msg : "run failed");
      gc_req_finish(x->req, gt_now_ns());
      xfer_free(x);
    }
  }
  free(live);
  curl_multi_cleanup(m);
  free(url);
  *wall_s = (double)(t_last - t0) / 1e9;
  return ret;
}

static char *fixed_body(void *ud, int idx) {
  (void)idx;
  return strdup(ud);
}

int gc_run_one(const gc_http_t *h, const char *path, const char *body, gc_req_t *r, gt_err_t *err) {
  gc_run_opts_t o = {.http = h, .path = path, .concurrency = 1, .n_total = 1, .body = fixed_body,
                     .body_ud = (void *)body};
  double wall;
  return gc_run(&o, r, &wall, err);
}
