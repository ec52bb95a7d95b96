/* router/metrics.c — gantry_router_* in the Prometheus text format. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router/metrics.h"
#include "router/openai.h"

#define MAX_SERIES 128
#define MAX_MODELS 32
#define N_LAT_BUCKETS 14 /* the last is +Inf */
static const double lat_bounds[N_LAT_BUCKETS - 1] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                       1, 2.5, 5, 10, 30, 60};

typedef struct lat_hist {
  char model[ADM_NAME_MAX + 1];
  uint64_t b[METRICS_N_LAT][N_LAT_BUCKETS]; /* not cumulative */
  double sum[METRICS_N_LAT];
  uint64_t count[METRICS_N_LAT];
} lat_hist_t;

typedef struct series {
  char route[32];
  int status;
  uint64_t n;
} series_t;

typedef struct reason {
  char name[32];
  uint64_t n;
} reason_t;

struct metrics {
  series_t req[MAX_SERIES];
  int nreq;
  reason_t rej[32];
  int nrej;
  uint64_t data_losses, snapshot_entries;
  size_t grpc_unsent;
  lat_hist_t lat[MAX_MODELS];
  int nlat;
};

void metrics_observe(metrics_t *m, metrics_lat_t which, const char *model, double seconds) {
  lat_hist_t *h = NULL;
  for (int i = 0; i < m->nlat && !h; i++)
    if (!strcmp(m->lat[i].model, model)) h = &m->lat[i];
  if (!h) {
    if (m->nlat == MAX_MODELS) return;
    h = &m->lat[m->nlat++];
    snprintf(h->model, sizeof h->model, "%s", model);
  }
  int k = 0;
  while (k < N_LAT_BUCKETS - 1 && seconds > lat_bounds[k]) k++;
  h->b[which][k]++;
  h->sum[which] += seconds;
  h->count[which]++;
}

metrics_t *metrics_create(void) { return calloc(1, sizeof(metrics_t)); }
void metrics_destroy(metrics_t *m) { free(m); }

void metrics_request(metrics_t *m, const char *route, int status) {
  for (int i = 0; i < m->nreq; i++)
    if (m->req[i].status == status && !strcmp(m->req[i].route, route)) {
      m->req[i].n++;
      return;
    }
  if (m->nreq == MAX_SERIES) return;
  series_t *s = &m->req[m->nreq++];
  snprintf(s->route, sizeof s->route, "%s", route);
  s->status = status;
  s->n = 1;
}

uint64_t metrics_requests(const metrics_t *m, const char *route, int status) {
  for (int i = 0; i < m->nreq; i++)
    if (m->req[i].status == status && !strcmp(m->req[i].route, route)) return m->req[i].n;
  return 0;
}

void metrics_reject(metrics_t *m, const char *reason) {
  for (int i = 0; i < m->nrej; i++)
    if (!strcmp(m->rej[i].name, reason)) {
      m->rej[i].n++;
      return;
    }
  if (m->nrej == 32) return;
  snprintf(m->rej[m->nrej].name, sizeof m->rej[0].name, "%s", reason);
  m->rej[m->nrej++].n = 1;
}

void metrics_set_dataguard(metrics_t *m, uint64_t losses, uint64_t snapshot_entries) {
  m->data_losses = losses;
  m->snapshot_entries = snapshot_entries;
}

void metrics_set_grpc_unsent(metrics_t *m, size_t bytes) { m->grpc_unsent = bytes; }

char *metrics_render(metrics_t *m, const adm_stats_t *as, pool_t *p, const adm_queue_row_t *rows, int nrows) {
  oa_sb_t b = {0};
  char line[640];
#define OUT(...)                                          \
  do {                                                    \
    int n_ = snprintf(line, sizeof line, __VA_ARGS__);    \
    if (n_ > 0) oa_sb_append(&b, line, (size_t)n_ < sizeof line ? (size_t)n_ : sizeof line - 1); \
  } while (0)
  OUT("# HELP gantry_router_requests_total HTTP and gRPC requests by route and status.\n");
  OUT("# TYPE gantry_router_requests_total counter\n");
  for (int i = 0; i < m->nreq; i++)
    OUT("gantry_router_requests_total{route=\"%s\",status=\"%d\"} %llu\n", m->req[i].route, m->req[i].status,
        (unsigned long long)m->req[i].n);
  OUT("# HELP gantry_router_rejections_total Requests refused before reaching an engine, by reason.\n");
  OUT("# TYPE gantry_router_rejections_total counter\n");
  for (int i = 0; i < m->nrej; i++)
    OUT("gantry_router_rejections_total{reason=\"%s\"} %llu\n", m->rej[i].name, (unsigned long long)m->rej[i].n);
  OUT("# HELP gantry_router_admission_wait_seconds Time from arrival to admission.\n");
  OUT("# TYPE gantry_router_admission_wait_seconds histogram\n");
  uint64_t cum = 0;
  for (int i = 0; i < ADM_WAIT_BUCKETS; i++) {
    cum += as->wait_hist[i];
    if (i == ADM_WAIT_BUCKETS - 1) OUT("gantry_router_admission_wait_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)cum);
    else OUT("gantry_router_admission_wait_seconds_bucket{le=\"%g\"} %llu\n", adm_wait_bucket_ms[i] / 1000, (unsigned long long)cum);
  }
  OUT("gantry_router_admission_wait_seconds_sum %.6f\n", as->wait_ms_sum / 1000);
  OUT("gantry_router_admission_wait_seconds_count %llu\n", (unsigned long long)as->wait_count);
  static const char *lat_name[METRICS_N_LAT] = {"gantry_router_time_to_first_token_seconds",
                                                "gantry_router_e2e_request_latency_seconds"};
  static const char *lat_help[METRICS_N_LAT] = {"Time from arrival at the router to the first token.",
                                                "Time from arrival at the router to the final message."};
  for (int w = 0; w < METRICS_N_LAT; w++) {
    OUT("# HELP %s %s\n# TYPE %s histogram\n", lat_name[w], lat_help[w], lat_name[w]);
    for (int i = 0; i < m->nlat; i++) {
      const lat_hist_t *h = &m->lat[i];
      uint64_t c = 0;
      for (int k = 0; k < N_LAT_BUCKETS; k++) {
        c += h->b[w][k];
        if (k == N_LAT_BUCKETS - 1) OUT("%s_bucket{model_name=\"%s\",le=\"+Inf\"} %llu\n", lat_name[w], h->model, (unsigned long long)c);
        else OUT("%s_bucket{model_name=\"%s\",le=\"%g\"} %llu\n", lat_name[w], h->model, lat_bounds[k], (unsigned long long)c);
      }
      OUT("%s_sum{model_name=\"%s\"} %.6f\n", lat_name[w], h->model, h->sum[w]);
      OUT("%s_count{model_name=\"%s\"} %llu\n", lat_name[w], h->model, (unsigned long long)h->count[w]);
    }
  }
  OUT("# HELP gantry_router_admitted_total Requests admitted by this router.\n");
  OUT("# TYPE gantry_router_admitted_total counter\ngantry_router_admitted_total %llu\n", (unsigned long long)as->admitted);
  OUT("# HELP gantry_router_leases_reaped_total Leases of dead routers this router reclaimed.\n");
  OUT("# TYPE gantry_router_leases_reaped_total counter\ngantry_router_leases_reaped_total %llu\n",
      (unsigned long long)as->reaped_leases);
  OUT("# HELP gantry_router_leases_restored_total Leases this router re-registered after Redis lost them.\n");
  OUT("# TYPE gantry_router_leases_restored_total counter\ngantry_router_leases_restored_total %llu\n",
      (unsigned long long)as->restored_leases);
  OUT("# HELP gantry_router_waiting Requests of this router waiting for admission.\n");
  OUT("# TYPE gantry_router_waiting gauge\ngantry_router_waiting %u\n", as->waiting_now);
  OUT("# HELP gantry_router_leases_held Admission leases this router holds.\n");
  OUT("# TYPE gantry_router_leases_held gauge\ngantry_router_leases_held %u\n", as->held_now);
  OUT("# HELP gantry_router_redis_up Admission's Redis connection is up (1).\n");
  OUT("# TYPE gantry_router_redis_up gauge\ngantry_router_redis_up %d\n", as->redis_up ? 1 : 0);
  OUT("# HELP gantry_router_routers_alive Routers alive in Redis at this router's last heartbeat, itself included.\n");
  OUT("# TYPE gantry_router_routers_alive gauge\ngantry_router_routers_alive %u\n", as->routers_alive);
  OUT("# HELP gantry_router_redis_data_loss_total Times this router found Redis had lost its data (epoch changed).\n");
  OUT("# TYPE gantry_router_redis_data_loss_total counter\ngantry_router_redis_data_loss_total %llu\n",
      (unsigned long long)m->data_losses);
  OUT("# HELP gantry_router_redis_snapshot_entries API key and limit entries this router would restore after a data loss.\n");
  OUT("# TYPE gantry_router_redis_snapshot_entries gauge\ngantry_router_redis_snapshot_entries %llu\n",
      (unsigned long long)m->snapshot_entries);
  OUT("# HELP gantry_router_grpc_unsent_bytes gRPC front output queued for clients, not yet taken by the transport.\n");
  OUT("# TYPE gantry_router_grpc_unsent_bytes gauge\ngantry_router_grpc_unsent_bytes %zu\n", m->grpc_unsent);
  OUT("# HELP gantry_router_queue_depth Requests queued in Redis per pool (tenant=\"\") and tenant.\n");
  OUT("# TYPE gantry_router_queue_depth gauge\n");
  for (int i = 0; i < nrows; i++)
    OUT("gantry_router_queue_depth{model_name=\"%s\",tenant=\"%s\"} %lld\n", rows[i].model, rows[i].tenant,
        (long long)rows[i].queued);
  OUT("# HELP gantry_router_inflight Requests running per pool (tenant=\"\") and tenant, all routers.\n");
  OUT("# TYPE gantry_router_inflight gauge\n");
  for (int i = 0; i < nrows; i++)
    OUT("gantry_router_inflight{model_name=\"%s\",tenant=\"%s\"} %lld\n", rows[i].model, rows[i].tenant,
        (long long)rows[i].inflight);
  OUT("# HELP gantry_router_engine_up Engine health as the router sees it (1 ready).\n");
  OUT("# TYPE gantry_router_engine_up gauge\n");
  for (int i = 0; i < pool_count(p); i++) {
    pool_engine_t *e = pool_at(p, i);
    OUT("gantry_router_engine_up{model_name=\"%s\",engine=\"%s\"} %d\n", e->model, e->target, e->up ? 1 : 0);
  }
  OUT("# HELP gantry_router_engine_inflight Streams this router has open to an engine.\n");
  OUT("# TYPE gantry_router_engine_inflight gauge\n");
  for (int i = 0; i < pool_count(p); i++) {
    pool_engine_t *e = pool_at(p, i);
    OUT("gantry_router_engine_inflight{model_name=\"%s\",engine=\"%s\"} %d\n", e->model, e->target, e->inflight);
  }
  OUT("# HELP gantry_router_engine_checks_failed_total Health checks of an engine that failed (down, TLS, token).\n");
  OUT("# TYPE gantry_router_engine_checks_failed_total counter\n");
  for (int i = 0; i < pool_count(p); i++) {
    pool_engine_t *e = pool_at(p, i);
    OUT("gantry_router_engine_checks_failed_total{model_name=\"%s\",engine=\"%s\"} %llu\n", e->model, e->target,
        (unsigned long long)e->checks_failed);
  }
#undef OUT
  if (!b.p) oa_sb_append(&b, "", 0);
  return b.p;
}
