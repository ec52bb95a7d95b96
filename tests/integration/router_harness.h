/* tests/integration/router_harness.h — what the router tests need: a scripted fake Engine
 * (real gRPC server in the test process), the gantry-router binary as a child process, and a
 * small libcurl HTTP client. The fake engine's behaviour is picked by words in the prompt:
 *   TOOL      one tool call get_weather({"city":"Paris"}) in two argument fragments
 *   THINK     reasoning "let me think" (2 tokens) then content "42"
 *   SLOW      max_tokens (default 50) tokens, one per 20 ms
 *   PACE U B  max_tokens (default 50) tokens, one per U us (4600), each B bytes of text (11)
 *   FLOOD     max_tokens (default 50) tokens of 16 KiB each, one message each, as fast as it can
 *   DIE       one delta, then the stream fails (UNAVAILABLE) as if the engine crashed
 *   FAILFINAL one delta, then a Final with finish_reason ERROR ("sampling failed"), status OK
 *   FAILFIRST every other such call (process-wide, the 1st, 3rd, ...) fails before the first token
 *   TOOLONG   INVALID_ARGUMENT "prompt has 5000 tokens but the context length is 4096"
 *   BADPARAM_LB / BADPARAM_TEMP / BADPARAM_NONE  INVALID_ARGUMENT naming the field in trailing
 *             metadata (logit_bias / sampling.temperature / none) with a message whose first
 *             word names another one
 *   otherwise "Hello" + " world" (2 tokens); a repeated prompt reports cached tokens. */
#ifndef GANTRY_TESTS_ROUTER_HARNESS_H
#define GANTRY_TESTS_ROUTER_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "gantry/v1/engine.pb-c.h"

typedef struct fe fe_t;
fe_t *fe_start(const char *name);
/* The same on a given port (0: any; a restarted engine comes back on its old port). */
fe_t *fe_start_at(const char *name, int port);
int fe_port(const fe_t *f);
void fe_set_ready(fe_t *f, bool ready);
/* Health answers DRAINING while set. */
void fe_set_draining(fe_t *f, bool draining);
/* Counters: Generate calls received, calls that ended cancelled, streams open now. */
int fe_generates(fe_t *f);
int fe_cancelled(fe_t *f);
int fe_active(fe_t *f);
/* Most streams open at once since start / the last fe_reset_max (all tenants, and per tenant). */
int fe_max_active(fe_t *f);
int fe_tenant_max_active(fe_t *f, const char *tenant);
void fe_reset_max(fe_t *f);
/* Tenants of the Generate calls in arrival order (up to max; returns the count). */
int fe_arrivals(fe_t *f, char (*out)[32], int max);
/* The same arrivals' prompts (or last chat message), truncated to 31 bytes. */
int fe_arrival_labels(fe_t *f, char (*out)[32], int max);
/* Waits (up to ms) until pred(f) holds; returns 1 if it did. */
int fe_wait(fe_t *f, int (*pred)(fe_t *), int ms);
/* Copy of the last GenerateRequest any fake engine of this process received (free with
 * protobuf_c_message_free_unpacked) or NULL. */
Gantry__V1__GenerateRequest *fe_last_request(fe_t *f);
void fe_stop(fe_t *f);

typedef struct rp {
  pid_t pid;
  int http_port, grpc_port;
  int out_fd; /* router stdout */
} rp_t;
/* Starts $GANTRY_BIN/gantry-router with the arguments (NULL-terminated array) plus
 * --http 127.0.0.1:0 (and --auth none unless the arguments name --auth); waits for its "listening" line. 0 or -1. */
int rp_start(rp_t *r, const char *const *args);
/* The same with RLIMIT_NOFILE (soft and hard) set to nofile in the router's process (0: as the
 * test's). */
int rp_start_nofile(rp_t *r, const char *const *args, long nofile);
/* Waits until GET /ready is 200 (up to ms). 1 if ready. */
int rp_wait_ready(rp_t *r, int ms);
/* Waits until at least n engines show gantry_router_engine_up 1 in /metrics (up to ms). 1 if
 * so. /ready needs one engine per model; a test that counts on which engine a request reaches
 * (prefix affinity, cached tokens) needs them all up first. */
int rp_wait_engines_up(rp_t *r, int n, int ms);
/* Value of the unlabelled metric `name` in the router's /metrics (sent with the optional
 * "Name: value" header hdr), or -1. */
long long rp_metric(rp_t *r, const char *name, const char *hdr);
/* Peak resident memory (VmHWM) of the router process in KiB, or -1. */
long rp_peak_rss_kib(const rp_t *r);
/* SIGTERM and wait; returns the exit status (or -1). */
int rp_stop(rp_t *r);
/* SIGKILL and reap. */
void rp_kill9(rp_t *r);

/* The real `gantry-engine serve` ($GANTRY_BIN) on $GANTRY_GOLDEN/qwen3-tiny.bf16.gguf as model
 * "tiny" with --threads 1 plus extra (NULL-terminated: --listen etc.); its stderr is appended to
 * log_path. Waits (60 s) for its "ready grpc_port=N metrics_port=M" line; the process gets
 * SIGKILL when the test process dies. 0 or -1. */
typedef struct ep {
  pid_t pid;
  int out_fd;
  int grpc_port, metrics_port;
} ep_t;
int ep_start(ep_t *e, const char *log_path, const char *const *extra);
/* SIGTERM and reap. */
void ep_stop(ep_t *e);

/* The usual stack of a router test: a redis-server, one fake engine for model "tiny" and the
 * router (--redis, --engine tiny=..., then extra, NULL-terminated). rstack_start aborts the
 * test process when something does not start; rstack_stop returns rp_stop's status. */
typedef struct rstack {
  struct rs *rs;
  fe_t *fe;
  rp_t rp;
} rstack_t;
void rstack_start(rstack_t *s, const char *fe_name, const char *const *extra);
int rstack_stop(rstack_t *s);

/* HTTP request to 127.0.0.1:port. hdrs: NULL-terminated "Name: value" list (may be NULL).
 * *body (malloc'd) gets the response body, *hdr_out (optional) the response headers. Returns
 * the status, or -1 on a transport error. */
long http_req(int port, const char *method, const char *path, const char *const *hdrs, const char *data,
              size_t data_len, char **body, char **hdr_out);

/* A free loopback TCP port. */
int free_tcp_port(void);

#endif
