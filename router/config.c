/* router/config.c — command line of gantry-router. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router/config.h"
#include "router/redis_sentinel.h"

const char *rt_usage(void) {
  return "usage: gantry-router [--http HOST:PORT] [--grpc HOST:PORT] [--redis redis://HOST:PORT]\n"
         "                     [--redis-sentinel HOST:PORT,... [--redis-master-name NAME]]\n"
         "                     --engine MODEL=HOST:PORT [--engine ...] [--auth keys|none] [--admin-key K]\n"
         "                     [--protect-info] [--reasoning-field both|reasoning|reasoning_content]\n"
         "                     [--max-body-bytes N] [--max-response-bytes N] [--http-timeout-s S] [--health-ms MS]\n"
         "                     [--http-head-timeout-s S] [--http-body-timeout-s S] [--max-header-bytes N]\n"
         "                     [--max-headers N] [--http-max-conns N] [--http-max-conns-per-addr N]\n"
         "                     [--stream-buffer-bytes N] [--stream-write-timeout-s S] [--drain-timeout-s S]\n"
         "                     [--request-timeout-s S] [--lease-ttl-ms MS] [--queue-timeout-ms MS]\n"
         "                     [--admission-hold-ms MS] [--engine-stale-ms MS]\n"
         "                     [--default-max-inflight N] [--default-max-queued N] [--key-prefix P]\n"
         "                     [--responses-ttl-s S] [--cors-origins LIST]\n"
         "                     [--engine-token-file F] [--engine-tls-ca F [--engine-tls-cert F --engine-tls-key F]\n"
         "                     [--engine-tls-name NAME]]\n"
         "       gantry-router --version\n"
         "       gantry-router register (--redis redis://HOST:PORT | --redis-sentinel H:P,...) --engine MODEL=HOST:PORT [--interval-ms MS]\n"
         "                     [--key-prefix P]   (heartbeat sidecar: registers an engine in Redis)\n"
         "  --http 127.0.0.1:8080 (OpenAI API, /health, /ready, /metrics, /admin/*), --grpc off unless given.\n"
         "  Engines come from --engine and/or the Redis hash <prefix>engines (MODEL=HOST:PORT -> unix ms of\n"
         "  the last heartbeat); a registered engine without a heartbeat for --engine-stale-ms is skipped.\n"
         "  --auth keys (default): every request needs an API key from the Redis hash <prefix>apikeys\n"
         "  (field sha256hex(key) -> tenant); none readable -> 503. --auth none: no key needed (tenant\n"
         "  'default' unless a known key is given). Admin routes need --admin-key (or $GANTRY_ADMIN_KEY);\n"
         "  without one they are closed with --auth keys and open with --auth none. --protect-info:\n"
         "  /metrics, /v1/models and gRPC ListModels need an API key or the admin key too.\n"
         "  --max-body-bytes caps HTTP bodies (413) and gRPC request messages (RESOURCE_EXHAUSTED).\n"
         "  --max-response-bytes caps a response built in memory (a non-streaming body, a /v1/responses\n"
         "  object): a request that could pass it is refused (400 response_too_large), one that passes\n"
         "  it anyway is cancelled with the same error.\n"
         "  --http-head-timeout-s / --http-body-timeout-s: total deadlines for a request's head (from its\n"
         "  first byte) and body (from the end of the head), whatever the byte rate (408); --http-timeout-s\n"
         "  is the idle timeout. --max-header-bytes / --max-headers: 431 above. --http-max-conns: open\n"
         "  connections (default: RLIMIT_NOFILE less a reserve, at most 16384); --http-max-conns-per-addr\n"
         "  (default 256): more from one client address get 429.\n"
         "  Engines: --engine-token-file (or $GANTRY_ENGINE_TOKEN) is sent to every engine (its\n"
         "  --auth-token-file); --engine-tls-ca makes the engine links TLS, --engine-tls-cert/-key adds\n"
         "  this router's certificate (mutual TLS). An engine that refuses them is never ready.\n"
         "  --stream-buffer-bytes bounds the unsent output of each stream (SSE and gRPC); a stream kept\n"
         "  full for --stream-write-timeout-s is cancelled.\n"
         "  --redis-sentinel: find the Redis master through these sentinels (instead of --redis) and\n"
         "  follow a promotion; --redis-master-name is the monitored name (default gantry).\n"
         "  --responses-ttl-s: how long stored /v1/responses stay in Redis. --cors-origins: origins\n"
         "  (comma-separated, * = any) whose browser requests get CORS headers.\n";
}

void rt_config_defaults(rt_config_t *c) {
  memset(c, 0, sizeof *c);
  snprintf(c->http_addr, sizeof c->http_addr, "127.0.0.1:8080");
  snprintf(c->redis_host, sizeof c->redis_host, "127.0.0.1");
  c->redis_port = 6379;
  snprintf(c->redis_master_name, sizeof c->redis_master_name, "gantry");
  snprintf(c->key_prefix, sizeof c->key_prefix, "gantry:");
  c->reasoning_field = OA_REASONING_BOTH;
  c->max_body_bytes = 8L << 20;
  c->max_response_bytes = 64L << 20;
  c->stream_buffer_bytes = 1L << 20;
  c->stream_write_timeout_s = 30;
  c->http_timeout_s = 30;
  c->http_head_timeout_s = 10;
  c->http_body_timeout_s = 60;
  c->max_header_bytes = 32L << 10;
  c->max_headers = 100;
  c->http_max_conns = 0;
  c->http_max_conns_per_addr = 256;
  c->health_ms = 1000;
  c->request_timeout_ms = 600000;
  c->drain_timeout_s = 30;
  c->responses_ttl_s = 86400;
  c->engine_stale_ms = 10000;
  c->auth_required = true;
  const char *ak = getenv("GANTRY_ADMIN_KEY");
  if (ak) snprintf(c->admin_key, sizeof c->admin_key, "%s", ak);
}

static int parse_long(const char *s, long lo, long hi, long *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (end == s || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

static int parse_redis(rt_config_t *c, const char *url, gt_err_t *err) {
  const char *p = url;
  if (!strncmp(p, "redis://", 8)) p += 8;
  const char *colon = strrchr(p, ':');
  char host[128];
  long port = 6379;
  if (colon) {
    snprintf(host, sizeof host, "%.*s", (int)(colon - p), p);
    char ps[16];
    snprintf(ps, sizeof ps, "%s", colon + 1);
    char *slash = strchr(ps, '/');
    if (slash) *slash = '\0';
    if (parse_long(ps, 1, 65535, &port)) return gt_err_set(err, GT_EINVAL, "--redis %s: bad port", url);
  } else {
    snprintf(host, sizeof host, "%s", p);
  }
  if (!host[0]) return gt_err_set(err, GT_EINVAL, "--redis %s: no host", url);
  snprintf(c->redis_host, sizeof c->redis_host, "%s", host);
  c->redis_port = (int)port;
  return GT_OK;
}

int rt_config_parse(rt_config_t *c, int argc, char **argv, bool *help, gt_err_t *err) {
  *help = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      *help = true;
      return GT_OK;
    }
    if (!strcmp(a, "--protect-info")) {
      c->protect_info = true;
      continue;
    }
    if (i + 1 >= argc) return gt_err_set(err, GT_EINVAL, "%s needs a value", a);
    const char *v = argv[++i];
    long n;
    if (!strcmp(a, "--http")) snprintf(c->http_addr, sizeof c->http_addr, "%s", v);
    else if (!strcmp(a, "--grpc")) snprintf(c->grpc_addr, sizeof c->grpc_addr, "%s", v);
    else if (!strcmp(a, "--redis")) {
      if (parse_redis(c, v, err)) return GT_EINVAL;
    } else if (!strcmp(a, "--redis-sentinel")) {
      if (strlen(v) >= sizeof c->redis_sentinels || rsent_check(v, err))
        return gt_err_set(err, GT_EINVAL, "--redis-sentinel %s: expected HOST:PORT[,HOST:PORT...]", v);
      snprintf(c->redis_sentinels, sizeof c->redis_sentinels, "%s", v);
    } else if (!strcmp(a, "--redis-master-name")) {
      if (!v[0] || strlen(v) >= sizeof c->redis_master_name || strpbrk(v, " \r\n"))
        return gt_err_set(err, GT_EINVAL, "--redis-master-name %s: bad name", v);
      snprintf(c->redis_master_name, sizeof c->redis_master_name, "%s", v);
    } else if (!strcmp(a, "--engine")) {
      const char *eq = strchr(v, '=');
      const char *pc = eq ? strrchr(eq, ':') : NULL;
      if (!eq || eq == v || !eq[1] || !pc || pc == eq + 1 || !pc[1]) return gt_err_set(err, GT_EINVAL, "--engine %s: expected MODEL=HOST:PORT", v);
      if (c->n_engines >= RT_MAX_ENGINES) return gt_err_set(err, GT_EINVAL, "too many --engine (max %d)", RT_MAX_ENGINES);
      if ((size_t)(eq - v) > ADM_NAME_MAX) return gt_err_set(err, GT_EINVAL, "--engine %s: model name too long", v);
      snprintf(c->engines[c->n_engines].model, sizeof c->engines[0].model, "%.*s", (int)(eq - v), v);
      snprintf(c->engines[c->n_engines].target, sizeof c->engines[0].target, "%s", eq + 1);
      if (strpbrk(c->engines[c->n_engines].model, ": *"))
        return gt_err_set(err, GT_EINVAL, "--engine %s: model names may not contain ':', '*' or spaces", v);
      c->n_engines++;
    } else if (!strcmp(a, "--admin-key")) snprintf(c->admin_key, sizeof c->admin_key, "%s", v);
    else if (!strcmp(a, "--auth")) {
      if (!strcmp(v, "keys")) c->auth_required = true;
      else if (!strcmp(v, "none")) c->auth_required = false;
      else return gt_err_set(err, GT_EINVAL, "--auth %s: expected keys or none", v);
    } else if (!strcmp(a, "--engine-token-file")) snprintf(c->engine_token_file, sizeof c->engine_token_file, "%s", v);
    else if (!strcmp(a, "--engine-tls-ca")) snprintf(c->engine_tls_ca, sizeof c->engine_tls_ca, "%s", v);
    else if (!strcmp(a, "--engine-tls-cert")) snprintf(c->engine_tls_cert, sizeof c->engine_tls_cert, "%s", v);
    else if (!strcmp(a, "--engine-tls-key")) snprintf(c->engine_tls_key, sizeof c->engine_tls_key, "%s", v);
    else if (!strcmp(a, "--engine-tls-name")) snprintf(c->engine_tls_name, sizeof c->engine_tls_name, "%s", v);
    else if (!strcmp(a, "--key-prefix")) snprintf(c->key_prefix, sizeof c->key_prefix, "%s", v);
    else if (!strcmp(a, "--cors-origins")) {
      if (strlen(v) >= sizeof c->cors_origins) return gt_err_set(err, GT_EINVAL, "--cors-origins: list too long");
      snprintf(c->cors_origins, sizeof c->cors_origins, "%s", v);
    }
    else if (!strcmp(a, "--reasoning-field")) {
      if (!strcmp(v, "both")) c->reasoning_field = OA_REASONING_BOTH;
      else if (!strcmp(v, "reasoning")) c->reasoning_field = OA_REASONING_ONLY;
      else if (!strcmp(v, "reasoning_content")) c->reasoning_field = OA_REASONING_CONTENT_ONLY;
      else return gt_err_set(err, GT_EINVAL, "--reasoning-field %s: expected both, reasoning or reasoning_content", v);
    } else {
      struct { const char *name; long lo, hi; void *dst; int is_long; } nums[] = {
          {"--max-body-bytes", 1024, 1L << 30, &c->max_body_bytes, 1},
          {"--max-response-bytes", 4096, 1L << 40, &c->max_response_bytes, 1},
          {"--stream-buffer-bytes", 4096, 1L << 30, &c->stream_buffer_bytes, 1},
          {"--stream-write-timeout-s", 1, 3600, &c->stream_write_timeout_s, 0},
          {"--http-timeout-s", 1, 3600, &c->http_timeout_s, 0},
          {"--http-head-timeout-s", 1, 3600, &c->http_head_timeout_s, 0},
          {"--http-body-timeout-s", 1, 3600, &c->http_body_timeout_s, 0},
          {"--max-header-bytes", 1024, 1L << 24, &c->max_header_bytes, 1},
          {"--max-headers", 8, 100000, &c->max_headers, 0},
          {"--http-max-conns", 1, 1000000, &c->http_max_conns, 0},
          {"--http-max-conns-per-addr", 1, 1000000, &c->http_max_conns_per_addr, 0},
          {"--drain-timeout-s", 0, 3600, &c->drain_timeout_s, 0},
          {"--responses-ttl-s", 1, 365L * 86400, &c->responses_ttl_s, 0},
          {"--health-ms", 50, 600000, &c->health_ms, 0},
          {"--request-timeout-s", 1, 86400, &c->request_timeout_ms, 0},
          {"--lease-ttl-ms", 300, 3600000, &c->lease_ttl_ms, 0},
          {"--queue-timeout-ms", 1, 3600000, &c->queue_timeout_ms, 0},
          {"--admission-hold-ms", 1, 3600000, &c->hold_ms, 0},
          {"--engine-stale-ms", 100, 3600000, &c->engine_stale_ms, 0},
          {"--default-max-inflight", 0, 1000000, &c->default_max_inflight, 0},
          {"--default-max-queued", 0, 10000000, &c->default_max_queued, 0},
      };
      int found = 0;
      for (size_t k = 0; k < sizeof nums / sizeof nums[0]; k++) {
        if (strcmp(a, nums[k].name)) continue;
        found = 1;
        if (parse_long(v, nums[k].lo, nums[k].hi, &n))
          return gt_err_set(err, GT_EINVAL, "%s %s: expected an integer in [%ld, %ld]", a, v, nums[k].lo, nums[k].hi);
        if (nums[k].is_long) *(long *)nums[k].dst = n;
        else *(int *)nums[k].dst = (int)n;
        if (!strcmp(a, "--request-timeout-s")) c->request_timeout_ms = (int)n * 1000;
      }
      if (!found) return gt_err_set(err, GT_EINVAL, "unknown option %s", a);
    }
  }
  return GT_OK;
}
