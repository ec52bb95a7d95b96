/* router/auth.c — API keys: Redis hash <prefix>apikeys maps SHA-256(key) (hex) -> tenant.
 * Whether a key is needed is the router's --auth setting, never inferred from Redis data:
 *   keys: no key or an unknown key -> AUTH_DENIED; no keys readable (the hash is empty or
 *         missing) -> AUTH_NOKEYS (503). Admin routes need --admin-key (closed without one).
 *   none: every request runs; a known key picks its tenant, otherwise tenant "default". Admin
 *         routes need --admin-key when one is set, else they are open.
 * Keys are never stored or logged in clear. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/sha256.h"
#include "router/auth.h"

struct auth {
  rc_t *rc;
  char hash_key[96];
  char admin_sha[65]; /* "" = no admin key */
  bool required;      /* --auth keys */
};

typedef struct op {
  auth_t *a;
  bool admin;
  char sha[65];
  auth_cb cb;
  void *arg;
} op_t;

auth_t *auth_create(rc_t *rc, const char *key_prefix, const char *admin_key, bool required, gt_err_t *err) {
  auth_t *a = calloc(1, sizeof *a);
  if (!a) {
    gt_err_set(err, GT_ENOMEM, "auth: out of memory");
    return NULL;
  }
  a->rc = rc;
  a->required = required;
  snprintf(a->hash_key, sizeof a->hash_key, "%sapikeys", key_prefix);
  if (admin_key && admin_key[0]) gt_sha256_hex(admin_key, strlen(admin_key), a->admin_sha);
  return a;
}

void auth_destroy(auth_t *a) { free(a); }

void auth_detach(auth_t *a) {
  if (a) a->rc = NULL;
}

const char *auth_bearer(const char *h) {
  if (!h) return NULL;
  while (*h == ' ') h++;
  if (!strncasecmp(h, "Bearer ", 7)) h += 7;
  while (*h == ' ') h++;
  return *h ? h : NULL;
}

static int ct_equal(const char *a, const char *b) {
  unsigned d = 0;
  for (int i = 0; i < 64; i++) d |= (unsigned)(a[i] ^ b[i]);
  return d == 0;
}

/* The key (or its absence) matched nothing: r is the HLEN of the keys hash. */
static void on_hlen(void *arg, redisReply *r, const char *err) {
  op_t *o = arg;
  (void)err;
  if (!r || r->type != REDIS_REPLY_INTEGER) o->cb(o->arg, AUTH_UNAVAILABLE, NULL);
  else if (o->a->required) o->cb(o->arg, r->integer == 0 ? AUTH_NOKEYS : AUTH_DENIED, NULL);
  else o->cb(o->arg, AUTH_OK, "default");
  free(o);
}

static void on_hget(void *arg, redisReply *r, const char *err) {
  op_t *o = arg;
  (void)err;
  if (!r || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL)) {
    o->cb(o->arg, AUTH_UNAVAILABLE, NULL);
    free(o);
    return;
  }
  if (r->type == REDIS_REPLY_STRING) {
    char tenant[ADM_NAME_MAX + 1];
    snprintf(tenant, sizeof tenant, "%.*s", (int)r->len, r->str);
    o->cb(o->arg, AUTH_OK, tenant);
    free(o);
    return;
  }
  /* unknown key: denied (--auth keys), tenant "default" (--auth none); HLEN tells "denied" from
   * "no keys readable" */
  const char *argv[] = {"HLEN", o->a->hash_key};
  if (!o->a->rc || rc_command(o->a->rc, 2, argv, NULL, on_hlen, o) != GT_OK) {
    o->cb(o->arg, AUTH_UNAVAILABLE, NULL);
    free(o);
  }
}

void auth_check(auth_t *a, const char *key, auth_for_t what, auth_cb cb, void *arg) {
  const bool admin = what == AUTH_FOR_ADMIN;
  op_t *o = calloc(1, sizeof *o);
  if (!o) {
    cb(arg, AUTH_UNAVAILABLE, NULL);
    return;
  }
  o->a = a;
  o->admin = admin;
  o->cb = cb;
  o->arg = arg;
  if (!a->rc) { /* shutting down */
    free(o);
    cb(arg, AUTH_UNAVAILABLE, NULL);
    return;
  }
  if (key && key[0]) gt_sha256_hex(key, strlen(key), o->sha);
  if (what == AUTH_FOR_ANY && key && key[0] && a->admin_sha[0] && ct_equal(o->sha, a->admin_sha)) {
    free(o);
    cb(arg, AUTH_OK, "admin");
    return;
  }
  if (admin) {
    /* admin routes: the admin key; without one configured, open only with --auth none */
    bool ok = a->admin_sha[0] ? key && key[0] && ct_equal(o->sha, a->admin_sha) : !a->required;
    free(o);
    cb(arg, ok ? AUTH_OK : AUTH_DENIED, ok ? "admin" : NULL);
    return;
  }
  int rc;
  if (key && key[0]) {
    const char *argv[] = {"HGET", a->hash_key, o->sha};
    rc = rc_command(a->rc, 3, argv, NULL, on_hget, o);
  } else if (a->required) {
    const char *argv[] = {"HLEN", a->hash_key};
    rc = rc_command(a->rc, 2, argv, NULL, on_hlen, o);
  } else {
    free(o);
    cb(arg, AUTH_OK, "default");
    return;
  }
  if (rc != GT_OK) {
    free(o);
    cb(arg, AUTH_UNAVAILABLE, NULL);
  }
}
