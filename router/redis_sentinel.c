/* router/redis_sentinel.c — see redis_sentinel.h. */
#include "router/redis_sentinel.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

typedef struct rsent_addr {
  char host[160];
  int port;
} rsent_addr_t;

/* Splits the list into addrs; returns the count or a negative GT_E* code. */
static int parse_list(const char *list, rsent_addr_t *addrs, gt_err_t *err) {
  if (!list || !list[0]) return gt_err_set(err, GT_EINVAL, "redis sentinel list is empty");
  int n = 0;
  const char *p = list;
  while (*p) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    char item[160];
    if (len == 0 || len >= sizeof item)
      return gt_err_set(err, GT_EINVAL, "redis sentinel list '%s': bad entry", list);
    memcpy(item, p, len);
    item[len] = 0;
    char *colon = strrchr(item, ':');
    char *endp = NULL;
    long port = colon ? strtol(colon + 1, &endp, 10) : 0;
    if (!colon || colon == item || !endp || *endp || port < 1 || port > 65535)
      return gt_err_set(err, GT_EINVAL, "redis sentinel '%s': expected HOST:PORT", item);
    if (n >= RSENT_MAX)
      return gt_err_set(err, GT_EINVAL, "redis sentinel list: more than %d entries", RSENT_MAX);
    *colon = 0;
    if (addrs) {
      snprintf(addrs[n].host, sizeof addrs[n].host, "%s", item);
      addrs[n].port = (int)port;
    }
    n++;
    p += len;
    if (*p == ',') p++;
  }
  return n;
}

int rsent_check(const char *sentinels, gt_err_t *err) {
  int n = parse_list(sentinels, NULL, err);
  return n < 0 ? n : GT_OK;
}

static redisContext *connect_bounded(const char *host, int port, int timeout_ms) {
  struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  redisContext *c = redisConnectWithTimeout(host, port, tv);
  if (!c) return NULL;
  if (c->err || redisSetTimeout(c, tv) != REDIS_OK) {
    redisFree(c);
    return NULL;
  }
  return c;
}

/* True when host:port answers ROLE with "master". */
static int is_master(const char *host, int port, int timeout_ms) {
  redisContext *c = connect_bounded(host, port, timeout_ms);
  if (!c) return 0;
  redisReply *r = redisCommand(c, "ROLE");
  int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
           r->element[0]->type == REDIS_REPLY_STRING && !strcmp(r->element[0]->str, "master");
  if (r) freeReplyObject(r);
  redisFree(c);
  return ok;
}

int rsent_resolve(const char *sentinels, const char *master_name, int timeout_ms,
                  const char *prev_host, int prev_port, char *host, size_t hostsz, int *port,
                  gt_err_t *err) {
  rsent_addr_t addrs[RSENT_MAX];
  int n = parse_list(sentinels, addrs, err);
  if (n < 0) return n;
  if (!master_name || !master_name[0]) return gt_err_set(err, GT_EINVAL, "redis sentinel: no master name");
  if (timeout_ms <= 0) timeout_ms = 200;
  int answered = 0;
  bool named_prev = false;
  char last[160] = "";
  for (int i = 0; i < n; i++) {
    redisContext *c = connect_bounded(addrs[i].host, addrs[i].port, timeout_ms);
    if (!c) continue;
    redisReply *r = redisCommand(c, "SENTINEL get-master-addr-by-name %s", master_name);
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_STRING) {
      answered++;
      char h[128];
      snprintf(h, sizeof h, "%s", r->element[0]->str);
      int p = atoi(r->element[1]->str);
      snprintf(last, sizeof last, "%s:%d", h, p);
      freeReplyObject(r);
      redisFree(c);
      if (prev_host && p == prev_port && !strcmp(h, prev_host)) {
        named_prev = true; /* not dialled: it may be the dead one */
        continue;
      }
      if (p > 0 && p <= 65535 && is_master(h, p, timeout_ms)) {
        snprintf(host, hostsz, "%s", h);
        *port = p;
        return GT_OK;
      }
      continue;
    }
    if (r) freeReplyObject(r);
    redisFree(c);
  }
  if (named_prev) { /* nobody names another master: let the caller retry the same one */
    snprintf(host, hostsz, "%s", prev_host);
    *port = prev_port;
    return GT_OK;
  }
  if (!answered)
    return gt_err_set(err, GT_EIO, "redis sentinel: none of %d sentinels reachable or knowing master '%s'", n,
                      master_name);
  return gt_err_set(err, GT_EIO, "redis sentinel: master '%s' named %s is not a master (yet)",
                    master_name, last);
}
