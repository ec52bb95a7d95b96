/* router/config.h — gantry-router settings (flags and environment) and their defaults. */
#ifndef GANTRY_ROUTER_CONFIG_H
#define GANTRY_ROUTER_CONFIG_H

#include <stdbool.h>
#include "common/err.h"
#include "router/admission.h"
#include "router/openai.h"

#define RT_MAX_ENGINES 32
typedef struct rt_config {
  char http_addr[128];   /* "127.0.0.1:8080"; "" = no HTTP */
  char grpc_addr[128];   /* "" = no gRPC front */
  char redis_host[128];
  int redis_port;
  char redis_sentinels[1024]; /* --redis-sentinel host:port,...: master found via Sentinel; "" = off */
  char redis_master_name[128]; /* --redis-master-name (default "gantry" with --redis-sentinel) */
  char key_prefix[64];   /* Redis key prefix, default "gantry:" */
  struct { char model[ADM_NAME_MAX + 1]; char target[256]; } engines[RT_MAX_ENGINES];
  int n_engines;
  char admin_key[256];   /* "" = none (admin routes closed with --auth keys, open with none) */
  bool protect_info;     /* --protect-info: /metrics, /v1/models, ListModels need a key */
  bool auth_required;    /* --auth keys (default) | none: never inferred from Redis data */
  oa_reasoning_field_t reasoning_field;
  long max_body_bytes;   /* 413 above this; default 8 MiB */
  long max_response_bytes; /* what a response built in memory may hold (non-streaming bodies, /v1/responses); 64 MiB */
  long stream_buffer_bytes; /* output buffered per stream (SSE or gRPC) before the engine is paused; 1 MiB */
  int stream_write_timeout_s; /* a paused stream that does not drain for this long is cancelled; 30 */
  int http_timeout_s;    /* idle keep-alive / read timeout (reset by each byte); default 30 */
  int http_head_timeout_s; /* total deadline for a request head, from its first byte; 10 */
  int http_body_timeout_s; /* total deadline for a body, from the end of the head; 60 */
  long max_header_bytes; /* request line + headers (431 above); 32 KiB */
  int max_headers;       /* header fields (431 above); 100 */
  int http_max_conns;    /* open HTTP connections (accepting pauses at the cap); 0 = from RLIMIT_NOFILE */
  int http_max_conns_per_addr; /* per client IP address (429 above); 256 */
  int health_ms;         /* health check period; default 1000 */
  int request_timeout_ms;/* engine stream deadline; default 600000 */
  int drain_timeout_s;   /* SIGTERM: live streams get this long to finish; default 30 */
  int responses_ttl_s;   /* stored /v1/responses live this long in Redis; default 86400 */
  char cors_origins[1024]; /* --cors-origins: comma-separated allowed origins, "*" = any; "" = no CORS */
  int engine_stale_ms;   /* registered engine without heartbeat for this long: not routable */
  /* router -> engine authentication (files; "" = not used): a shared token (also
   * $GANTRY_ENGINE_TOKEN) and TLS: the CA that signed the engines' certificates, and this
   * router's certificate and key for mutual TLS; tls_name: the name engines' certificates carry */
  char engine_token_file[256], engine_tls_ca[256], engine_tls_cert[256], engine_tls_key[256], engine_tls_name[128];
  int lease_ttl_ms, queue_timeout_ms, hold_ms, default_max_inflight, default_max_queued;
} rt_config_t;

/* Fills defaults. */
void rt_config_defaults(rt_config_t *c);
/* Parses argv (after defaults); GT_OK, or GT_EINVAL with err (usage problems). *help set for
 * --help. */
int rt_config_parse(rt_config_t *c, int argc, char **argv, bool *help, gt_err_t *err);
const char *rt_usage(void);

#endif
