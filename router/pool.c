/* router/pool.c — the engine pool: engines per model (--engine MODEL=HOST:PORT), checked
 * with application-level Health (and Info until it answered once) RPCs on a timer. An engine is
 * marked down after two consecutive failed checks and up again after one success; a failed check
 * resets the channel's reconnect backoff, so a restarted engine serves within two checks. Requests go
 * to the ready engine of their model with the fewest streams in flight. */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "router/pool.h"
#include "router/router.h"

#define POOL_AFFINITY_SLACK 2 /* extra in-flight streams accepted to keep a prefix on its engine */

struct pool {
  router_t *rt;
  mbox_t *mb;
  struct event *timer;
  int health_ms;
  pool_engine_t *e[RT_MAX_ENGINES];
  int n;
};

typedef struct check {
  pool_t *p;
  int idx;
  bool info;
  gt_rpc_stream_t *s;
  ProtobufCMessage *resp; /* set on the client thread before done */
} check_t;

/* ---- check results (loop thread) ---- */
static void check_done_loop(void *a, void *b, intptr_t code) {
  check_t *c = a;
  (void)b;
  pool_engine_t *e = c->p->e[c->idx];
  bool ok = false;
  if (code == GT_RPC_OK && c->resp) {
    if (c->info) {
      Gantry__V1__InfoResponse *in = (Gantry__V1__InfoResponse *)c->resp;
      e->context_length = in->context_length;
      ok = true;
      GT_LOG_INFO("engine info model=%s target=%s engine_model=%s context=%u", e->model, e->target,
                  in->model_name, in->context_length);
    } else {
      Gantry__V1__HealthResponse *h = (Gantry__V1__HealthResponse *)c->resp;
      ok = h->status == GANTRY__V1__HEALTH_RESPONSE__STATUS__STATUS_READY;
      bool draining = h->status == GANTRY__V1__HEALTH_RESPONSE__STATUS__STATUS_DRAINING;
      if (h->status == GANTRY__V1__HEALTH_RESPONSE__STATUS__STATUS_FAILED && e->up)
        GT_LOG_WARN("engine failed model=%s target=%s", e->model, e->target);
      if (draining && !e->draining) GT_LOG_INFO("engine draining model=%s target=%s", e->model, e->target);
      e->draining = draining;
    }
  }
  if (c->resp) protobuf_c_message_free_unpacked(c->resp, NULL);
  e->checking = false;
  const bool refused = code == GT_RPC_UNAUTHENTICATED;
  if (refused && !e->auth_refused)
    GT_LOG_ERROR("engine refused this router's credentials (UNAUTHENTICATED) model=%s target=%s: check "
                 "--engine-token-file / $GANTRY_ENGINE_TOKEN against the engine's --auth-token-file; not routable",
                 e->model, e->target);
  e->auth_refused = refused;
  if (ok) {
    e->checks_ok++;
    e->fails = 0;
    if (!e->up) GT_LOG_INFO("engine up model=%s target=%s", e->model, e->target);
    e->up = true;
    e->ever_up = true;
  } else {
    /* the channel backs off reconnects up to minutes; a restarted engine must be found by the
     * next check, so every failed check ends the backoff */
    if (e->ec) gt_rpc_client_reset_backoff(ec_rpc(e->ec)); /* NULL: the pool is closing */
    e->checks_failed++;
    e->fails++;
    if (e->up && e->fails >= 2) {
      e->up = false;
      GT_LOG_WARN("engine down model=%s target=%s consecutive_failures=%d", e->model, e->target, e->fails);
    }
  }
  free(c);
}

static void on_check_msg(void *user, gt_rpc_stream_t *s, ProtobufCMessage *msg) {
  check_t *c = user;
  (void)s;
  if (c->resp) protobuf_c_message_free_unpacked(c->resp, NULL);
  c->resp = msg;
}

static void on_check_done(void *user, gt_rpc_stream_t *s, const gt_rpc_status_t *st) {
  check_t *c = user;
  gt_rpc_stream_release(s);
  if (mbox_post(c->p->mb, check_done_loop, c, NULL, st->code)) {
    if (c->resp) protobuf_c_message_free_unpacked(c->resp, NULL);
    free(c);
  }
}

static void start_check(pool_t *p, int i) {
  pool_engine_t *e = p->e[i];
  if (e->checking) return;
  check_t *c = calloc(1, sizeof *c);
  if (!c) return;
  c->p = p;
  c->idx = i;
  c->info = e->context_length == 0;
  Gantry__V1__InfoRequest ireq = GANTRY__V1__INFO_REQUEST__INIT;
  Gantry__V1__HealthRequest hreq = GANTRY__V1__HEALTH_REQUEST__INIT;
  gt_rpc_stream_args_t a = {
      .method = c->info ? EC_METHOD_INFO : EC_METHOD_HEALTH,
      .request = c->info ? &ireq.base : &hreq.base,
      .response = c->info ? &gantry__v1__info_response__descriptor : &gantry__v1__health_response__descriptor,
      /* a slow answer is not a dead engine: under CPU contention (a loaded CI machine, an engine
       * busy with a large prefill) checks of a live engine took over 500 ms, two in a row marked
       * it down and requests moved to another engine (test_router_http lost its prefix-cache
       * hit that way); a dead or unreachable engine still fails at once (connection refused) */
      .timeout_ms = p->health_ms * 5 > 3000 ? p->health_ms * 5 : 3000,
      .on_msg = on_check_msg,
      .on_done = on_check_done,
      .user = c,
  };
  gt_err_t err;
  e->checking = true;
  if (gt_rpc_client_stream(ec_rpc(e->ec), &a, &c->s, &err)) {
    e->checking = false;
    free(c);
    GT_LOG_WARN("engine check start failed target=%s: %s", e->target, err.msg);
  }
}

static void on_timer(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  pool_t *p = arg;
  for (int i = 0; i < p->n; i++) start_check(p, i);
}

pool_t *pool_create(router_t *rt, struct event_base *base, mbox_t *mb, int health_ms, gt_err_t *err) {
  pool_t *p = calloc(1, sizeof *p);
  if (!p) {
    gt_err_set(err, GT_ENOMEM, "pool: out of memory");
    return NULL;
  }
  p->rt = rt;
  p->mb = mb;
  p->health_ms = health_ms > 0 ? health_ms : 1000;
  p->timer = event_new(base, -1, EV_PERSIST, on_timer, p);
  struct timeval tv = {p->health_ms / 1000, (p->health_ms % 1000) * 1000};
  if (!p->timer || event_add(p->timer, &tv)) {
    pool_destroy(p);
    gt_err_set(err, GT_EIO, "pool: timer failed");
    return NULL;
  }
  return p;
}

void pool_engine_opts(const gt_rpc_creds_t *cr, const char *tls_name, gt_rpc_client_opts_t *o) {
  o->auth_token = cr->token;
  o->tls_ca_pem = cr->ca;
  o->tls_cert_pem = cr->cert;
  o->tls_key_pem = cr->key;
  o->tls_server_name = tls_name && tls_name[0] ? tls_name : NULL;
}

int pool_add(pool_t *p, const char *model, const char *target, gt_err_t *err) {
  if (p->n >= RT_MAX_ENGINES) return gt_err_set(err, GT_EINVAL, "too many engines (max %d)", RT_MAX_ENGINES);
  pool_engine_t *e = calloc(1, sizeof *e);
  if (!e) return gt_err_set(err, GT_ENOMEM, "pool: out of memory");
  snprintf(e->model, sizeof e->model, "%s", model);
  snprintf(e->target, sizeof e->target, "%s", target);
  /* a fixed 1 MiB stream window: a stream paused for a slow client holds at most that much unread
   * engine output in gRPC (BDP probing grows the window to many MB on a fast link) */
  gt_rpc_client_opts_t o = {.own_thread = 1, .flow_window_bytes = 1 << 20};
  pool_engine_opts(&p->rt->engine_creds, p->rt->cfg.engine_tls_name, &o);
  int rc = ec_open(target, &o, &e->ec, err);
  if (rc) {
    free(e);
    return rc;
  }
  p->e[p->n++] = e;
  start_check(p, p->n - 1); /* first check at once: ready as soon as the engine answers */
  GT_LOG_INFO("engine added model=%s target=%s", model, target);
  return GT_OK;
}

void pool_destroy(pool_t *p) {
  if (!p) return;
  if (p->timer) event_free(p->timer);
  for (int i = 0; i < p->n; i++) {
    ec_close(p->e[i]->ec); /* posts the last check results */
    p->e[i]->ec = NULL;
  }
  mbox_drain(p->mb);
  for (int i = 0; i < p->n; i++) free(p->e[i]);
  free(p);
}

static uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

#define FNV_OFFSET 1469598103934665603ULL

/* FNV-1a over s, at most *left bytes (decremented); left NULL: the whole string. */
static uint64_t fnv_str(uint64_t h, const char *s, size_t *left) {
  for (; *s && (!left || *left); s++) {
    h = (h ^ (uint8_t)*s) * 1099511628211ULL;
    if (left) (*left)--;
  }
  return h;
}

pool_engine_t *pool_pick(pool_t *p, const char *model, const pool_engine_t *avoid, uint64_t affinity) {
  int min_inflight = -1;
  for (int i = 0; i < p->n; i++) {
    pool_engine_t *e = p->e[i];
    if (!e->up || e->stale || e == avoid || strcmp(e->model, model)) continue;
    if (min_inflight < 0 || e->inflight < min_inflight) min_inflight = e->inflight;
  }
  if (min_inflight < 0) return NULL;
  /* candidates: within POOL_AFFINITY_SLACK of the least loaded; among them the prefix's
   * rendezvous-hash winner (same prompt start -> same engine -> prefix-cache hits), or the least
   * loaded when there is no affinity key */
  pool_engine_t *best = NULL;
  uint64_t best_score = 0;
  for (int i = 0; i < p->n; i++) {
    pool_engine_t *e = p->e[i];
    if (!e->up || e->stale || e == avoid || strcmp(e->model, model)) continue;
    if (!affinity) {
      if (!best || e->inflight < best->inflight) best = e;
      continue;
    }
    if (e->inflight > min_inflight + POOL_AFFINITY_SLACK) continue;
    uint64_t score = mix64(affinity ^ fnv_str(FNV_OFFSET, e->target, NULL));
    if (!best || score > best_score) {
      best = e;
      best_score = score;
    }
  }
  return best;
}

bool pool_has_model(const pool_t *p, const char *model) {
  for (int i = 0; i < p->n; i++)
    if (!strcmp(p->e[i]->model, model)) return true;
  return false;
}

bool pool_model_ready(const pool_t *p, const char *model) {
  for (int i = 0; i < p->n; i++)
    if (!strcmp(p->e[i]->model, model) && p->e[i]->up && !p->e[i]->stale) return true;
  return false;
}

bool pool_all_ready(const pool_t *p, char *why, size_t n) {
  if (p->n == 0) {
    snprintf(why, n, "no engines configured");
    return false;
  }
  for (int i = 0; i < p->n; i++)
    if (!p->e[i]->registered && !pool_model_ready(p, p->e[i]->model)) {
      snprintf(why, n, "no ready engine for model %s%s", p->e[i]->model,
               p->e[i]->auth_refused ? " (an engine refused the router's credentials)" : "");
      return false;
    }
  return true;
}

int pool_count(const pool_t *p) { return p->n; }

pool_engine_t *pool_find(pool_t *p, const char *model, const char *target) {
  for (int i = 0; i < p->n; i++)
    if (!strcmp(p->e[i]->model, model) && !strcmp(p->e[i]->target, target)) return p->e[i];
  return NULL;
}
pool_engine_t *pool_at(pool_t *p, int i) { return i >= 0 && i < p->n ? p->e[i] : NULL; }

uint32_t pool_context(const pool_t *p, const char *model) {
  uint32_t c = 0;
  for (int i = 0; i < p->n; i++)
    if (!strcmp(p->e[i]->model, model) && p->e[i]->context_length > c) c = p->e[i]->context_length;
  return c;
}

#define AFFINITY_BYTES 512 /* about the first hundred tokens: system prompt + start of the turn */

uint64_t pool_affinity(const Gantry__V1__GenerateRequest *g) {
  uint64_t h = FNV_OFFSET;
  size_t left = AFFINITY_BYTES;
  if (g->input_case == GANTRY__V1__GENERATE_REQUEST__INPUT_PROMPT) {
    h = fnv_str(h, g->prompt, &left);
  } else if (g->input_case == GANTRY__V1__GENERATE_REQUEST__INPUT_CHAT) {
    for (size_t i = 0; i < g->chat->n_messages && left; i++) {
      h = fnv_str(h, g->chat->messages[i]->role, &left);
      h = fnv_str(h, g->chat->messages[i]->content, &left);
    }
  } else if (g->input_case == GANTRY__V1__GENERATE_REQUEST__INPUT_TOKENS) {
    for (size_t i = 0; i < g->tokens->n_ids && i < AFFINITY_BYTES / 4; i++)
      h = (h ^ (uint32_t)g->tokens->ids[i]) * 1099511628211ULL;
  }
  return h ? h : 1;
}
