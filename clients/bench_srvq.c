/* clients/bench_srvq.c — the server's queue time per cell from /metrics. */
#include "clients/bench_srvq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { Q_ROUTER, Q_VLLM, Q_ENGINE, P_VLLM, P_ENGINE };
static const struct {
  const char *name;
  double to_ms; /* unit of the series -> ms */
} series[GC_SRVQ_SOURCES] = {
    {"gantry_router_admission_wait_seconds", 1e3},    {"vllm:request_queue_time_seconds", 1e3},
    {"gantry_engine_request_queue_time_seconds", 1e3}, {"vllm:request_prefill_time_seconds", 1e3},
    {"gantry_engine_request_prefill_time_seconds", 1e3}};

static const char *spec_series[GC_SPEC_SOURCES][2] = {
    {"gantry_engine_spec_decode_num_drafts_total", "gantry_engine_spec_decode_num_accepted_tokens_total"},
    {"vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_accepted_tokens_total"}};

/* The value of a sample line p[0..len) after its name (nl chars) and labels; 0 if none. */
static int sample_value(const char *p, size_t len, size_t nl, double *x) {
  const char *v = p + nl;
  if (*v == '{') { /* skip the labels (values may hold '}' only when quoted) */
    int q = 0;
    for (v++; v < p + len && (q || *v != '}'); v++) {
      if (*v == '\\' && q) v++;
      else if (*v == '"') q = !q;
    }
    v++;
  }
  if (v >= p + len) return 0;
  char *end;
  *x = strtod(v, &end);
  return end != v;
}

/* A spec counter line: summed into snap over its label sets. */
static void parse_spec(const char *p, size_t len, size_t nl, gc_srvq_snap_t *snap) {
  for (int i = 0; i < GC_SPEC_SOURCES; i++)
    for (int w = 0; w < 2; w++) {
      const char *name = spec_series[i][w];
      double x;
      if (nl != strlen(name) || strncmp(p, name, nl) || !sample_value(p, len, nl, &x)) continue;
      double *d = w ? &snap->spec_accepted[i] : &snap->spec_drafts[i];
      *d = (*d < 0 ? 0 : *d) + x;
    }
}

void gc_srvq_parse(const char *text, gc_srvq_snap_t *snap) {
  for (int i = 0; i < GC_SRVQ_SOURCES; i++) snap->sum[i] = 0, snap->count[i] = -1;
  for (int i = 0; i < GC_SPEC_SOURCES; i++) snap->spec_drafts[i] = snap->spec_accepted[i] = -1;
  for (const char *p = text; p && *p;) {
    const char *eol = strchr(p, '\n');
    size_t len = eol ? (size_t)(eol - p) : strlen(p);
    if (len && *p != '#') {
      size_t nl = strcspn(p, "{ \t");
      if (nl > len) nl = len;
      parse_spec(p, len, nl, snap);
      for (int i = 0; i < GC_SRVQ_SOURCES; i++) {
        size_t bl = strlen(series[i].name);
        int is_sum = nl == bl + 4 && !strncmp(p, series[i].name, bl) && !strncmp(p + bl, "_sum", 4);
        int is_count = nl == bl + 6 && !strncmp(p, series[i].name, bl) && !strncmp(p + bl, "_count", 6);
        if (!is_sum && !is_count) continue;
        double x;
        if (!sample_value(p, len, nl, &x)) break;
        if (is_sum) snap->sum[i] += x * series[i].to_ms;
        else snap->count[i] = (snap->count[i] < 0 ? 0 : snap->count[i]) + x;
        break;
      }
    }
    p = eol ? eol + 1 : NULL;
  }
}

void gc_srvq_scrape(const gc_http_t *h, gc_srvq_snap_t *snap) {
  long status = 0;
  char *resp = NULL;
  gt_err_t err = {0};
  snap->ok = 0;
  gc_srvq_parse("", snap);
  if (gc_http_do(h, "GET", "/metrics", NULL, &status, &resp, &err) == GT_OK && status == 200) {
    gc_srvq_parse(resp, snap);
    snap->ok = 1;
  }
  free(resp);
}

void gc_cell_spec(gc_cell_t *c, const gc_srvq_snap_t *a, const gc_srvq_snap_t *b) {
  if (!a->ok || !b->ok) return;
  for (int i = 0; i < GC_SPEC_SOURCES; i++) {
    if (a->spec_drafts[i] < 0 || b->spec_drafts[i] < 0 || a->spec_accepted[i] < 0 || b->spec_accepted[i] < 0) continue;
    const double dd = b->spec_drafts[i] - a->spec_drafts[i], da = b->spec_accepted[i] - a->spec_accepted[i];
    if (dd > 0 && da >= 0) c->spec_accept_len = 1 + da / dd;
    return;
  }
}

/* The series i moved between the snapshots: mean ms per observation, else -1. */
static double moved(const gc_srvq_snap_t *a, const gc_srvq_snap_t *b, int i) {
  if (!a->ok || !b->ok || a->count[i] < 0 || b->count[i] < 0) return -1;
  double dn = b->count[i] - a->count[i], ds = b->sum[i] - a->sum[i];
  return dn > 0 && ds >= 0 ? ds / dn : -1;
}

void gc_cell_queue(gc_cell_t *c, const gc_req_t *r, int n, const gc_srvq_snap_t *before,
                   const gc_srvq_snap_t *after) {
  int src = -1;
  double q = -1;
  for (int i = Q_ROUTER; i <= Q_ENGINE && src < 0; i++)
    if ((q = moved(before, after, i)) >= 0) src = i;
  double ttft_sum = 0, e2e_sum = 0;
  int n_ok = 0, n_ttft = 0;
  for (int i = 0; i < n; i++) {
    if (r[i].error) continue;
    n_ok++;
    e2e_sum += r[i].e2e_ms;
    if (r[i].ttft_ms >= 0) ttft_sum += r[i].ttft_ms, n_ttft++;
  }
  char how[96] = "";
  if (src < 0) { /* no queue series: TTFT against the server's own prefill time */
    for (int i = P_VLLM; i <= P_ENGINE && src < 0; i++) {
      double pf = moved(before, after, i);
      if (pf >= 0 && n_ttft) {
        src = i;
        q = ttft_sum / n_ttft - pf;
        if (q < 0) q = 0;
        snprintf(how, sizeof how, " (TTFT %.0f ms - server prefill %.0f ms)", ttft_sum / n_ttft, pf);
      }
    }
  }
  if (src < 0 || !n_ok || c->wall_s <= 0) return;
  c->srv_queue_ms = q;
  snprintf(c->srv_queue_src, sizeof c->srv_queue_src, "%s%s", src >= P_VLLM ? "ttft-" : "", series[src].name);
  c->srv_inflight = (e2e_sum - n_ok * q) / 1000.0 / c->wall_s;
  if (c->srv_inflight < 0) c->srv_inflight = 0;
  if (!(c->cli_inflight >= GC_SRVQ_MIN_INFLIGHT && c->srv_inflight <= GC_SRVQ_LIMIT_SHARE * c->cli_inflight)) return;
  c->cap_limited = 1;
  const char *where = src == Q_ROUTER ? "the router's admission queue (a max_inflight cap)"
                      : src >= P_VLLM ? "a queue before prefill"
                                      : "the engine's scheduler queue (its max-num-seqs or KV-cache limit)";
  char note[1536]; /* room for any double; the cell keeps what fits */
  snprintf(note, sizeof note,
           "queued: requests waited %.0f ms on average in %s%s; the server worked on %.1f streams while the "
           "client kept %.1f open, so this cell measures that limit, not the engine at this load",
           q, where, how, c->srv_inflight, c->cli_inflight);
  strncpy(c->note_cap, note, sizeof c->note_cap - 1);
  c->note_cap[sizeof c->note_cap - 1] = 0;
}
