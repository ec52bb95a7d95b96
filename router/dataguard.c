/* router/dataguard.c — Redis data-loss detection and restore of operator data (dataguard.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "router/dataguard.h"

/* ARGV[1] prefix, ARGV[2] the epoch the caller knows ('' = none yet).
 * Returns {epoch or ''} when the epoch is missing or differs from a known one, else
 * {epoch, kind, key, field, value, ...}: kind 'h' a hash field, 's' a set member. */
static const char SNAP_LUA[] =
    "local P, A = ARGV[1], ARGV[1] .. 'adm:'\n"
    "local ep = redis.call('GET', A .. 'epoch')\n"
    "if not ep then return {''} end\n"
    "if ARGV[2] ~= '' and ep ~= ARGV[2] then return {ep} end\n"
    "local out = {ep}\n"
    "local function hash(k)\n"
    "  local kv = redis.call('HGETALL', k)\n"
    "  for i = 1, #kv, 2 do out[#out+1] = 'h'; out[#out+1] = k; out[#out+1] = kv[i]; out[#out+1] = kv[i+1] end\n"
    "end\n"
    "local function set(k, m) out[#out+1] = 's'; out[#out+1] = k; out[#out+1] = m; out[#out+1] = '' end\n"
    "hash(P .. 'apikeys')\n"
    "for _, m in ipairs(redis.call('SMEMBERS', A .. 'pools')) do\n"
    "  set(A .. 'pools', m)\n"
    "  hash(A .. 'lim:' .. m)\n"
    "  hash(A .. 'lim:' .. m .. ':*')\n"
    "  for _, t in ipairs(redis.call('SMEMBERS', A .. 'tenants:' .. m)) do\n"
    "    set(A .. 'tenants:' .. m, t)\n"
    "    hash(A .. 'lim:' .. m .. ':' .. t)\n"
    "  end\n"
    "end\n"
    "return out\n";

/* ARGV: kind, key, field, value quads (a snapshot). A hash that exists when the script starts is
 * left alone (re-applied by an operator); set members are added. Returns the hashes written. */
static const char RESTORE_LUA[] =
    "local fresh, n = {}, 0\n"
    "for i = 1, #ARGV, 4 do\n"
    "  local kind, k = ARGV[i], ARGV[i+1]\n"
    "  if kind == 's' then redis.call('SADD', k, ARGV[i+2])\n"
    "  else\n"
    "    if fresh[k] == nil then fresh[k] = redis.call('EXISTS', k) == 0; if fresh[k] then n = n + 1 end end\n"
    "    if fresh[k] then redis.call('HSET', k, ARGV[i+2], ARGV[i+3]) end\n"
    "  end\n"
    "end\n"
    "return n\n";

struct dg {
  rc_t *rc;
  char prefix[64];
  int snap_idx, restore_idx;
  char epoch[64];   /* the epoch known; "" = none yet */
  char **snap;      /* last snapshot: n quads (kind, key, field, value) */
  size_t nsnap;
  bool busy;        /* a script is in flight */
  uint64_t losses;
  bool seen;
  void (*on_loss)(void *arg); /* optional: told of each loss */
  void *loss_arg;
};

void dg_on_loss(dg_t *g, void (*fn)(void *arg), void *arg) {
  g->on_loss = fn;
  g->loss_arg = arg;
}

dg_t *dg_create(rc_t *rc, const char *key_prefix, gt_err_t *err) {
  dg_t *g = calloc(1, sizeof *g);
  if (!g) {
    gt_err_set(err, GT_ENOMEM, "dataguard: out of memory");
    return NULL;
  }
  g->rc = rc;
  snprintf(g->prefix, sizeof g->prefix, "%s", key_prefix);
  if ((g->snap_idx = rc_script_add(rc, SNAP_LUA, err)) < 0 || (g->restore_idx = rc_script_add(rc, RESTORE_LUA, err)) < 0) {
    free(g);
    return NULL;
  }
  return g;
}

static void snap_free(dg_t *g) {
  for (size_t i = 0; i < g->nsnap * 4; i++) free(g->snap[i]);
  free(g->snap);
  g->snap = NULL;
  g->nsnap = 0;
}

void dg_destroy(dg_t *g) {
  if (!g) return;
  snap_free(g);
  free(g);
}

void dg_detach(dg_t *g) {
  if (g) g->rc = NULL;
}

uint64_t dg_losses(const dg_t *g) { return g ? g->losses : 0; }
uint64_t dg_snapshot_entries(const dg_t *g) { return g ? g->nsnap : 0; }
bool dg_seen_epoch(const dg_t *g) { return g && g->seen; }

static void on_restore(void *arg, redisReply *r, const char *err) {
  dg_t *g = arg;
  g->busy = false;
  if (!r || r->type != REDIS_REPLY_INTEGER) {
    GT_LOG_ERROR("redis data loss: restoring API keys and limits failed (%s); retrying", r && r->str ? r->str : err ? err : "?");
    return; /* epoch still differs: the next tick tries again */
  }
  GT_LOG_WARN("redis data loss: restored %lld key(s) of API keys and limits from this router's last snapshot "
              "(%zu entries)", r->integer, g->nsnap);
  g->epoch[0] = '\0'; /* adopt the new epoch once admission has written it */
}

static void restore(dg_t *g) {
  if (!g->nsnap) {
    g->epoch[0] = '\0';
    return;
  }
  size_t n = g->nsnap * 4;
  const char **argv = malloc(n * sizeof *argv);
  if (!argv) return;
  for (size_t i = 0; i < n; i++) argv[i] = g->snap[i];
  if (rc_eval(g->rc, g->restore_idx, 0, (int)n, argv, NULL, on_restore, g) == GT_OK) g->busy = true;
  free(argv);
}

static void on_snap(void *arg, redisReply *r, const char *err) {
  dg_t *g = arg;
  g->busy = false;
  (void)err;
  if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 1 || r->element[0]->type != REDIS_REPLY_STRING) return;
  const char *ep = r->element[0]->str;
  if (g->epoch[0] && strcmp(ep, g->epoch)) {
    g->losses++;
    GT_LOG_ERROR("redis data loss detected: epoch %s is %s (Redis restarted empty or was flushed); enforcing the "
                 "API keys and limits this router last saw until they are re-applied", g->epoch, ep[0] ? ep : "gone");
    if (g->rc) restore(g);
    if (g->on_loss) g->on_loss(g->loss_arg);
    return;
  }
  if (!ep[0] || (r->elements - 1) % 4) return; /* no epoch yet: nothing to compare against */
  if (!g->epoch[0]) GT_LOG_INFO("redis epoch %s", ep);
  snprintf(g->epoch, sizeof g->epoch, "%s", ep);
  g->seen = true;
  size_t n = r->elements - 1;
  char **s = calloc(n ? n : 1, sizeof *s);
  if (!s) return;
  for (size_t i = 0; i < n; i++) {
    redisReply *e = r->element[i + 1];
    s[i] = strndup(e->type == REDIS_REPLY_STRING ? e->str : "", e->type == REDIS_REPLY_STRING ? e->len : 0);
    if (!s[i]) {
      for (size_t k = 0; k < i; k++) free(s[k]);
      free(s);
      return;
    }
  }
  snap_free(g);
  g->snap = s;
  g->nsnap = n / 4;
}

void dg_tick(dg_t *g) {
  if (!g || !g->rc || g->busy || !rc_connected(g->rc)) return;
  const char *argv[] = {g->prefix, g->epoch};
  if (rc_eval(g->rc, g->snap_idx, 0, 2, argv, NULL, on_snap, g) == GT_OK) g->busy = true;
}
