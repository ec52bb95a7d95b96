/* router/responses_store.c — stored /v1/responses records in Redis (see responses_store.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "router/responses_store.h"

typedef struct op {
  rstore_get_cb get;
  rstore_del_cb del;
  void *arg;
} op_t;

static void key_of(char *k, size_t n, const char *prefix, const char *id) { snprintf(k, n, "%sresp:%s", prefix, id); }

static void on_get(void *arg, redisReply *r, const char *err) {
  op_t *o = arg;
  (void)err;
  if (!r || r->type == REDIS_REPLY_ERROR) o->get(o->arg, RSTORE_UNAVAILABLE, NULL, 0);
  else if (r->type != REDIS_REPLY_STRING) o->get(o->arg, RSTORE_MISSING, NULL, 0);
  else o->get(o->arg, RSTORE_OK, r->str, r->len);
  free(o);
}

int rstore_get(rc_t *rc, const char *prefix, const char *id, rstore_get_cb cb, void *arg) {
  char k[256];
  key_of(k, sizeof k, prefix, id);
  op_t *o = calloc(1, sizeof *o);
  if (!o) return GT_ENOMEM;
  o->get = cb;
  o->arg = arg;
  const char *argv[] = {"GET", k};
  if (!rc || rc_command(rc, 2, argv, NULL, on_get, o) != GT_OK) {
    free(o);
    return GT_EIO;
  }
  return GT_OK;
}

static void on_put(void *arg, redisReply *r, const char *err) {
  (void)arg;
  if (!r || r->type == REDIS_REPLY_ERROR)
    GT_LOG_WARN("storing a response failed: %s", r ? r->str : err ? err : "no reply");
}

int rstore_put(rc_t *rc, const char *prefix, const char *id, const char *rec, int ttl_s) {
  char k[256], ttl[24];
  key_of(k, sizeof k, prefix, id);
  snprintf(ttl, sizeof ttl, "%d", ttl_s);
  const char *argv[] = {"SET", k, rec, "EX", ttl};
  if (!rc || rc_command(rc, 5, argv, NULL, on_put, NULL) != GT_OK) {
    GT_LOG_WARN("response %s not stored: Redis unreachable", id);
    return GT_EIO;
  }
  return GT_OK;
}

static void on_del(void *arg, redisReply *r, const char *err) {
  op_t *o = arg;
  (void)err;
  if (!r || r->type != REDIS_REPLY_INTEGER) o->del(o->arg, RSTORE_UNAVAILABLE);
  else o->del(o->arg, r->integer > 0 ? RSTORE_OK : RSTORE_MISSING);
  free(o);
}

int rstore_del(rc_t *rc, const char *prefix, const char *id, rstore_del_cb cb, void *arg) {
  char k[256];
  key_of(k, sizeof k, prefix, id);
  op_t *o = calloc(1, sizeof *o);
  if (!o) return GT_ENOMEM;
  o->del = cb;
  o->arg = arg;
  const char *argv[] = {"DEL", k};
  if (!rc || rc_command(rc, 2, argv, NULL, on_del, o) != GT_OK) {
    free(o);
    return GT_EIO;
  }
  return GT_OK;
}
