/* router/registry.c — engines registered in Redis: hash <prefix>engines, field "MODEL=HOST:PORT",
 * value = unix time in ms of the engine's last heartbeat. Every health period the router reads
 * the hash, adds engines it does not know yet to the pool and marks registered engines whose
 * heartbeat is older than stale_ms as not routable (they still get health checks, and come back
 * with the next heartbeat). `gantry-router register` is a heartbeat sidecar for an engine. */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "common/log.h"
#include "router/registry.h"
#include "router/router.h"

struct registry {
  router_t *rt;
  struct event *timer;
  char key[96];
  int stale_ms;
  bool busy;
};

static int64_t wall_ms(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

static void on_hgetall(void *arg, redisReply *r, const char *err) {
  registry_t *g = arg;
  (void)err;
  g->busy = false;
  if (!r || r->type != REDIS_REPLY_ARRAY) return;
  int64_t now = wall_ms();
  pool_t *p = g->rt->pool;
  for (size_t i = 0; i + 1 < r->elements; i += 2) {
    const redisReply *f = r->element[i], *v = r->element[i + 1];
    if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING) continue;
    char field[400];
    snprintf(field, sizeof field, "%.*s", (int)f->len, f->str);
    char *eq = strchr(field, '=');
    if (!eq || eq == field || (size_t)(eq - field) > ADM_NAME_MAX || !strchr(eq + 1, ':') || strpbrk(field, " *")) continue;
    *eq = '\0';
    const char *model = field, *target = eq + 1;
    if (strchr(model, ':')) continue;
    int64_t hb = strtoll(v->str, NULL, 10);
    pool_engine_t *e = pool_find(p, model, target);
    if (!e) {
      gt_err_t e2;
      if (pool_add(p, model, target, &e2)) {
        GT_LOG_WARN("registry: cannot add engine model=%s target=%s: %s", model, target, e2.msg);
        continue;
      }
      e = pool_find(p, model, target);
      if (!e) continue;
      e->registered = true;
      GT_LOG_INFO("registry: engine registered model=%s target=%s", model, target);
    }
    if (!e->registered) continue; /* given on the command line: no heartbeat needed */
    bool stale = now - hb > g->stale_ms;
    if (stale != e->stale)
      GT_LOG_WARN("registry: engine %s model=%s target=%s heartbeat_age_ms=%lld", stale ? "stale" : "fresh again", model,
                  target, (long long)(now - hb));
    e->stale = stale;
  }
}

static void on_timer(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  registry_t *g = arg;
  if (g->busy || !g->rt->rc || !rc_connected(g->rt->rc)) return;
  const char *argv[] = {"HGETALL", g->key};
  if (rc_command(g->rt->rc, 2, argv, NULL, on_hgetall, g) == GT_OK) g->busy = true;
}

registry_t *registry_start(router_t *rt, int period_ms, int stale_ms, gt_err_t *err) {
  registry_t *g = calloc(1, sizeof *g);
  if (!g) {
    gt_err_set(err, GT_ENOMEM, "registry: out of memory");
    return NULL;
  }
  g->rt = rt;
  g->stale_ms = stale_ms;
  snprintf(g->key, sizeof g->key, "%sengines", rt->cfg.key_prefix);
  g->timer = event_new(rt->base, -1, EV_PERSIST, on_timer, g);
  struct timeval tv = {period_ms / 1000, (period_ms % 1000) * 1000};
  if (!g->timer || event_add(g->timer, &tv)) {
    registry_stop(g);
    registry_free(g);
    gt_err_set(err, GT_EIO, "registry: timer failed");
    return NULL;
  }
  return g;
}

/* rc_destroy (after this) calls a pending on_hgetall with r NULL: g must stay valid until then,
 * so the router frees the registry after its Redis connection. */
void registry_stop(registry_t *g) {
  if (!g) return;
  if (g->timer) event_free(g->timer);
  g->timer = NULL;
}

void registry_free(registry_t *g) { free(g); }
