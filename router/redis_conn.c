/* router/redis_conn.c — see redis_conn.h. */
#include "router/redis_conn.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>

#include "common/log.h"
#include "router/redis_sentinel.h"

enum { RC_DOWN, RC_CONNECTING, RC_UP };

typedef struct rc_script {
  char *src;
  char sha[41]; /* "" until the first SCRIPT LOAD reply */
} rc_script_t;

struct rc {
  struct event_base *base;
  char *host, *name;
  int port;
  char *sentinels, *master_name; /* NULL unless Sentinel is used */
  int sentinel_timeout_ms;
  bool sentinel_warned;          /* one warning per outage, not one per retry */
  int backoff_min_ms, backoff_max_ms, connect_timeout_ms;
  int backoff_ms;       /* next reconnect delay */
  redisAsyncContext *ac; /* NULL while down */
  int state;
  bool destroying;
  unsigned connects;
  struct event *retry_ev;   /* reconnect timer */
  struct event *timeout_ev; /* connect timeout */
  rc_state_cb on_state;
  void *arg;
  rc_script_t *scripts;
  int nscripts;
};

/* One command in flight; owns copies of its arguments so a NOSCRIPT reply can be re-sent. */
typedef struct rc_call {
  rc_t *rc;
  rc_reply_cb cb;
  void *arg;
  int script; /* -1 for plain commands, else script index */
  int load;   /* 1: internal SCRIPT LOAD of script index `script` */
  int nkeys, argc;
  bool retried;
  char **argv;
  size_t *lens;
} rc_call_t;

static void rc_connect(rc_t *rc);

static void call_free(rc_call_t *c) {
  if (!c) return;
  for (int i = 0; i < c->argc; i++) free(c->argv[i]);
  free(c->argv);
  free(c->lens);
  free(c);
}

static rc_call_t *call_new(rc_t *rc, int argc, const char **argv, const size_t *argvlen) {
  rc_call_t *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->rc = rc;
  c->script = -1;
  c->argv = calloc((size_t)argc + 1, sizeof *c->argv);
  c->lens = calloc((size_t)argc + 1, sizeof *c->lens);
  if (!c->argv || !c->lens) {
    call_free(c);
    return NULL;
  }
  for (int i = 0; i < argc; i++) {
    size_t n = argvlen ? argvlen[i] : strlen(argv[i]);
    c->argv[i] = malloc(n + 1);
    if (!c->argv[i]) {
      c->argc = i;
      call_free(c);
      return NULL;
    }
    memcpy(c->argv[i], argv[i], n);
    c->argv[i][n] = 0;
    c->lens[i] = n;
  }
  c->argc = argc;
  return c;
}

static void schedule_reconnect(rc_t *rc) {
  if (rc->destroying) return;
  struct timeval tv = {rc->backoff_ms / 1000, (rc->backoff_ms % 1000) * 1000};
  evtimer_add(rc->retry_ev, &tv);
  rc->backoff_ms *= 2;
  if (rc->backoff_ms > rc->backoff_max_ms) rc->backoff_ms = rc->backoff_max_ms;
}

static int send_call(rc_t *rc, rc_call_t *c);

static void on_reply(redisAsyncContext *ac, void *r, void *priv) {
  rc_call_t *c = priv;
  rc_t *rc = c->rc;
  redisReply *reply = r;
  if (rc->destroying) {
    if (!c->load) c->cb(c->arg, NULL, "destroyed");
    call_free(c);
    return;
  }
  if (c->load) { /* internal SCRIPT LOAD */
    if (reply && reply->type == REDIS_REPLY_STRING && reply->len == 40)
      memcpy(rc->scripts[c->script].sha, reply->str, 41);
    else if (reply)
      GT_LOG_WARN("redis script load failed conn=%s script=%d err=%s", rc->name, c->script,
                  reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
    call_free(c);
    return;
  }
  if (reply && reply->type == REDIS_REPLY_ERROR && c->script >= 0 && !c->retried &&
      strncmp(reply->str, "NOSCRIPT", 8) == 0) {
    c->retried = true; /* re-send as EVAL: runs the source and caches it again */
    GT_LOG_INFO("redis script reload conn=%s script=%d", rc->name, c->script);
    if (send_call(rc, c) == GT_OK) return;
    c->cb(c->arg, NULL, "connection lost while re-loading a script");
    call_free(c);
    return;
  }
  (void)ac;
  bool demoted = reply && reply->type == REDIS_REPLY_ERROR && rc->sentinels &&
                 strncmp(reply->str, "READONLY", 8) == 0;
  c->cb(c->arg, reply, reply ? NULL : "connection to redis lost");
  call_free(c);
  if (demoted && rc->ac && rc->state == RC_UP) {
    /* this node is a replica now: drop it; the reconnect asks the sentinels again */
    GT_LOG_WARN("redis READONLY conn=%s addr=%s:%d: master demoted, re-resolving", rc->name,
                rc->host, rc->port);
    redisAsyncDisconnect(rc->ac);
  }
}

/* Sends c on the current connection (EVALSHA when the SHA is known and this is no retry). */
static int send_call(rc_t *rc, rc_call_t *c) {
  if (rc->state != RC_UP || !rc->ac) return GT_EIO;
  int rv;
  if (c->script < 0) {
    rv = redisAsyncCommandArgv(rc->ac, on_reply, c, c->argc, (const char **)c->argv, c->lens);
  } else {
    rc_script_t *s = &rc->scripts[c->script];
    bool sha = s->sha[0] && !c->retried;
    int n = c->argc + 3;
    const char **av = malloc((size_t)n * sizeof *av);
    size_t *al = malloc((size_t)n * sizeof *al);
    if (!av || !al) {
      free(av);
      free(al);
      return GT_ENOMEM;
    }
    char nk[16];
    snprintf(nk, sizeof nk, "%d", c->nkeys);
    av[0] = sha ? "EVALSHA" : "EVAL";
    al[0] = strlen(av[0]);
    av[1] = sha ? s->sha : s->src;
    al[1] = strlen(av[1]);
    av[2] = nk;
    al[2] = strlen(nk);
    for (int i = 0; i < c->argc; i++) {
      av[3 + i] = c->argv[i];
      al[3 + i] = c->lens[i];
    }
    rv = redisAsyncCommandArgv(rc->ac, on_reply, c, n, av, al);
    free(av);
    free(al);
  }
  return rv == REDIS_OK ? GT_OK : GT_EIO;
}

static void load_scripts(rc_t *rc) {
  for (int i = 0; i < rc->nscripts; i++) {
    const char *av[3] = {"SCRIPT", "LOAD", rc->scripts[i].src};
    rc_call_t *c = call_new(rc, 3, av, NULL);
    if (!c) continue; /* EVAL with the source still works */
    c->script = i;
    c->load = 1;
    if (redisAsyncCommandArgv(rc->ac, on_reply, c, 3, (const char **)c->argv, c->lens) != REDIS_OK)
      call_free(c);
  }
}

static void on_connect(const redisAsyncContext *ac, int status) {
  rc_t *rc = ac->data;
  evtimer_del(rc->timeout_ev);
  if (status != REDIS_OK) { /* hiredis frees ac after this callback */
    GT_LOG_DEBUG("redis connect failed conn=%s addr=%s:%d err=%s", rc->name, rc->host, rc->port,
                 ac->errstr);
    rc->ac = NULL;
    rc->state = RC_DOWN;
    schedule_reconnect(rc);
    return;
  }
  rc->state = RC_UP;
  rc->connects++;
  rc->backoff_ms = rc->backoff_min_ms;
  redisEnableKeepAlive((redisContext *)&ac->c);
  GT_LOG_INFO("redis connected conn=%s addr=%s:%d n=%u", rc->name, rc->host, rc->port, rc->connects);
  load_scripts(rc);
  if (rc->on_state) rc->on_state(rc->arg, true);
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
  rc_t *rc = ac->data;
  rc->ac = NULL; /* hiredis frees it after this callback */
  if (rc->destroying) return;
  bool was_up = rc->state == RC_UP;
  rc->state = RC_DOWN;
  GT_LOG_WARN("redis disconnected conn=%s addr=%s:%d err=%s", rc->name, rc->host, rc->port,
              status == REDIS_OK ? "closed" : ac->errstr);
  schedule_reconnect(rc);
  if (was_up && rc->on_state) rc->on_state(rc->arg, false);
}

static void on_connect_timeout(evutil_socket_t fd, short what, void *arg) {
  rc_t *rc = arg;
  (void)fd, (void)what;
  if (rc->state != RC_CONNECTING || !rc->ac) return;
  GT_LOG_DEBUG("redis connect timeout conn=%s", rc->name);
  redisAsyncContext *ac = rc->ac;
  rc->ac = NULL;
  rc->state = RC_DOWN;
  redisAsyncFree(ac); /* never connected: no disconnect callback */
  schedule_reconnect(rc);
}

static void on_retry(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  rc_connect(arg);
}

/* Sentinel mode: points host/port at the master the sentinels name. False (retry later) when
 * none is known yet. */
static bool resolve_master(rc_t *rc) {
  char host[128];
  int port = 0;
  gt_err_t e = {0};
  if (rsent_resolve(rc->sentinels, rc->master_name, rc->sentinel_timeout_ms,
                    rc->port > 0 ? rc->host : NULL, rc->port, host, sizeof host, &port, &e) != GT_OK) {
    if (!rc->sentinel_warned)
      GT_LOG_WARN("redis sentinel conn=%s: %s (retrying)", rc->name, e.msg);
    rc->sentinel_warned = true;
    return false;
  }
  rc->sentinel_warned = false;
  if (port != rc->port || strcmp(host, rc->host)) {
    char *h = strdup(host);
    if (!h) return false;
    GT_LOG_INFO("redis sentinel conn=%s master=%s addr=%s:%d (was %s:%d)", rc->name,
                rc->master_name, host, port, rc->host, rc->port);
    free(rc->host);
    rc->host = h;
    rc->port = port;
  }
  return true;
}

static void rc_connect(rc_t *rc) {
  if (rc->destroying || rc->ac) return;
  if (rc->sentinels && !resolve_master(rc)) {
    schedule_reconnect(rc);
    return;
  }
  redisAsyncContext *ac = redisAsyncConnect(rc->host, rc->port);
  if (!ac || ac->err) {
    GT_LOG_DEBUG("redis connect failed conn=%s err=%s", rc->name, ac ? ac->errstr : "alloc");
    if (ac) redisAsyncFree(ac);
    schedule_reconnect(rc);
    return;
  }
  ac->data = rc;
  if (redisLibeventAttach(ac, rc->base) != REDIS_OK) {
    redisAsyncFree(ac);
    schedule_reconnect(rc);
    return;
  }
  redisAsyncSetConnectCallback(ac, on_connect);
  redisAsyncSetDisconnectCallback(ac, on_disconnect);
  rc->ac = ac;
  rc->state = RC_CONNECTING;
  struct timeval tv = {rc->connect_timeout_ms / 1000, (rc->connect_timeout_ms % 1000) * 1000};
  evtimer_add(rc->timeout_ev, &tv);
}

rc_t *rc_create(struct event_base *base, const rc_config_t *cfg, rc_state_cb on_state, void *arg,
                gt_err_t *err) {
  bool sent = cfg && cfg->sentinels && cfg->sentinels[0];
  if (sent && (rsent_check(cfg->sentinels, err) != GT_OK || !cfg->master_name || !cfg->master_name[0])) {
    if (cfg->master_name && cfg->master_name[0]) return NULL;
    gt_err_set(err, GT_EINVAL, "redis_conn: sentinels need a master name");
    return NULL;
  }
  if (!base || !cfg || (!sent && (!cfg->host || !cfg->host[0] || cfg->port <= 0 || cfg->port > 65535))) {
    gt_err_set(err, GT_EINVAL, "redis_conn: need an event base, a host and a port in 1..65535");
    return NULL;
  }
  rc_t *rc = calloc(1, sizeof *rc);
  if (!rc) goto oom;
  rc->base = base;
  rc->host = strdup(cfg->host && cfg->host[0] ? cfg->host : "sentinel");
  rc->name = strdup(cfg->name ? cfg->name : "redis");
  rc->port = cfg->port;
  if (sent) {
    rc->sentinels = strdup(cfg->sentinels);
    rc->master_name = strdup(cfg->master_name);
    if (!rc->sentinels || !rc->master_name) goto oom;
  }
  rc->sentinel_timeout_ms = cfg->sentinel_timeout_ms > 0 ? cfg->sentinel_timeout_ms : 200;
  rc->backoff_min_ms = cfg->backoff_min_ms > 0 ? cfg->backoff_min_ms : 20;
  rc->backoff_max_ms = cfg->backoff_max_ms > 0 ? cfg->backoff_max_ms : 1000;
  if (rc->backoff_max_ms < rc->backoff_min_ms) rc->backoff_max_ms = rc->backoff_min_ms;
  rc->connect_timeout_ms = cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : 1000;
  rc->backoff_ms = rc->backoff_min_ms;
  rc->on_state = on_state;
  rc->arg = arg;
  rc->retry_ev = evtimer_new(base, on_retry, rc);
  rc->timeout_ev = evtimer_new(base, on_connect_timeout, rc);
  if (!rc->host || !rc->name || !rc->retry_ev || !rc->timeout_ev) goto oom;
  rc_connect(rc);
  return rc;
oom:
  if (rc) {
    rc->destroying = true;
    rc_destroy(rc);
  }
  gt_err_set(err, GT_ENOMEM, "redis_conn: out of memory");
  return NULL;
}

int rc_script_add(rc_t *rc, const char *src, gt_err_t *err) {
  if (!rc || !src) return gt_err_set(err, GT_EINVAL, "redis_conn: script source is NULL");
  rc_script_t *s = realloc(rc->scripts, (size_t)(rc->nscripts + 1) * sizeof *s);
  if (!s) return gt_err_set(err, GT_ENOMEM, "redis_conn: out of memory");
  rc->scripts = s;
  s[rc->nscripts].src = strdup(src);
  s[rc->nscripts].sha[0] = 0;
  if (!s[rc->nscripts].src) return gt_err_set(err, GT_ENOMEM, "redis_conn: out of memory");
  return rc->nscripts++;
}

static int submit(rc_t *rc, rc_call_t *c) {
  if (!c) return GT_ENOMEM;
  int rv = send_call(rc, c);
  if (rv != GT_OK) call_free(c);
  return rv;
}

int rc_eval(rc_t *rc, int idx, int nkeys, int argc, const char **argv, const size_t *argvlen,
            rc_reply_cb cb, void *arg) {
  if (!rc || idx < 0 || idx >= rc->nscripts || !cb || nkeys < 0 || nkeys > argc) return GT_EINVAL;
  if (rc->state != RC_UP) return GT_EIO;
  rc_call_t *c = call_new(rc, argc, argv, argvlen);
  if (c) {
    c->cb = cb;
    c->arg = arg;
    c->script = idx;
    c->nkeys = nkeys;
  }
  return submit(rc, c);
}

int rc_command(rc_t *rc, int argc, const char **argv, const size_t *argvlen, rc_reply_cb cb,
               void *arg) {
  if (!rc || argc < 1 || !cb) return GT_EINVAL;
  if (rc->state != RC_UP) return GT_EIO;
  rc_call_t *c = call_new(rc, argc, argv, argvlen);
  if (c) {
    c->cb = cb;
    c->arg = arg;
  }
  return submit(rc, c);
}

bool rc_connected(const rc_t *rc) { return rc && rc->state == RC_UP; }
unsigned rc_connects(const rc_t *rc) { return rc ? rc->connects : 0; }

void rc_destroy(rc_t *rc) {
  if (!rc) return;
  rc->destroying = true;
  if (rc->ac) {
    redisAsyncContext *ac = rc->ac;
    rc->ac = NULL;
    redisAsyncFree(ac); /* pending callbacks run with NULL ("destroyed") */
  }
  if (rc->retry_ev) event_free(rc->retry_ev);
  if (rc->timeout_ev) event_free(rc->timeout_ev);
  for (int i = 0; i < rc->nscripts; i++) free(rc->scripts[i].src);
  free(rc->scripts);
  free(rc->host);
  free(rc->name);
  free(rc->sentinels);
  free(rc->master_name);
  free(rc);
}
