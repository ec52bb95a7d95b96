/* tests/integration/test_engine_auth.c — the closed engine port (issue 26), with the real
 * `gantry-engine serve` binary (tests/golden/qwen3-tiny), the real router binary and a real
 * redis-server:
 *   - defaults: the gRPC port and the metrics port are bound to 127.0.0.1 (read back from
 *     /proc/net/tcp);
 *   - a shared token: calls without it or with a wrong one end UNAUTHENTICATED; a router with
 *     the right token serves, one with a wrong token never routes to the engine (503, and the
 *     error names no internal address);
 *   - mutual TLS (certificates made with the openssl command): a router with a client
 *     certificate signed by the engine's CA serves; one without a certificate, or with one from
 *     another CA, is refused, and so is a plaintext client. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/clock.h"
#include "common/engine_client.h"
#include "common/grpc_creds.h"
#include "tests/common/redis_server.h"
#include "tests/integration/router_harness.h"

static char g_dir[] = "/tmp/gantry-auth-XXXXXX";
static rs_t *g_rs;

static const char *path_of(const char *name) {
  static char bufs[8][512];
  static int k;
  char *b = bufs[k++ % 8];
  snprintf(b, 512, "%s/%s", g_dir, name);
  return b;
}

static void eng_start(ep_t *e, const char *const *extra) {
  if (ep_start(e, path_of("engine.log"), extra)) fail_msg("engine did not start (see %s)", path_of("engine.log"));
}

/* The local address of the listening TCP socket on port as /proc/net/tcp{,6} write it (hex;
 * an IPv4-mapped IPv6 address shown as its IPv4 part), or "". */
static void listen_addr(int port, char out[40]) {
  out[0] = 0;
  const char *files[] = {"/proc/net/tcp", "/proc/net/tcp6"};
  for (int k = 0; k < 2 && !out[0]; k++) {
    FILE *f = fopen(files[k], "r");
    if (!f) continue;
    char line[512];
    while (fgets(line, sizeof line, f)) {
      char local[40];
      unsigned p, st;
      if (sscanf(line, " %*d: %39[0-9A-F]:%X %*[0-9A-F]:%*X %X", local, &p, &st) == 3 && (int)p == port && st == 0x0A) {
        const char *v4 = !strncmp(local, "0000000000000000FFFF0000", 24) ? local + 24 : local;
        snprintf(out, 40, "%s", v4);
        break;
      }
    }
    fclose(f);
  }
}

/* Health over a direct client with these options; returns the gRPC code. */
static gt_rpc_code_t direct_health(int port, const gt_rpc_client_opts_t *o) {
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", port);
  ec_client_t *ec;
  gt_err_t err;
  assert_int_equal(ec_open(target, o, &ec, &err), 0);
  Gantry__V1__HealthResponse *h = NULL;
  gt_rpc_status_t st;
  ec_call_opts_t co = {.timeout_ms = 5000};
  gt_rpc_code_t code = ec_health(ec, &co, &h, &st);
  if (h) protobuf_c_message_free_unpacked(&h->base, NULL);
  ec_close(ec);
  return code;
}

static void start_router(rp_t *rp, int engine_port, const char *const *extra) {
  char redis[64], eng[64];
  snprintf(redis, sizeof redis, "redis://127.0.0.1:%d", rs_port(g_rs));
  snprintf(eng, sizeof eng, "tiny=127.0.0.1:%d", engine_port);
  const char *args[24] = {"--redis", redis, "--engine", eng, "--health-ms", "100"};
  int n = 6;
  for (int i = 0; extra[i]; i++) args[n++] = extra[i];
  args[n] = NULL;
  assert_int_equal(rp_start(rp, args), 0);
}

static const char *JSON_HDR[] = {"Content-Type: application/json", NULL};
static const char *COMPL = "{\"model\":\"tiny\",\"prompt\":\"hello\",\"max_tokens\":3,\"temperature\":0}";

/* The router serves a completion through the engine. */
static void assert_serves(rp_t *rp) {
  assert_true(rp_wait_ready(rp, 30000));
  char *b = NULL;
  long s = http_req(rp->http_port, "POST", "/v1/completions", JSON_HDR, COMPL, strlen(COMPL), &b, NULL);
  if (s != 200) fail_msg("completion: %ld %s", s, b ? b : "");
  assert_non_null(strstr(b, "\"text_completion\""));
  free(b);
}

/* Failed health checks the router counted for its one engine (-1: not found). */
static long checks_failed(rp_t *rp) {
  char *b = NULL;
  long v = -1;
  if (http_req(rp->http_port, "GET", "/metrics", NULL, NULL, 0, &b, NULL) == 200) {
    const char *p = strstr(b, "gantry_router_engine_checks_failed_total{");
    if (p && (p = strstr(p, "} "))) v = strtol(p + 2, NULL, 10);
  }
  free(b);
  return v;
}

/* The router refuses the engine: its checks fail (waited for: 3 of them), it is never ready,
 * and a completion gets a 503 that names no internal address. */
static void assert_refused(rp_t *rp, const char *why) {
  double end = gt_now_ms() + 30000;
  while (checks_failed(rp) < 3 && gt_now_ms() < end) usleep(20000);
  if (checks_failed(rp) < 3) fail_msg("%s: the router's checks did not fail", why);
  char *b = NULL;
  assert_int_equal(http_req(rp->http_port, "GET", "/ready", NULL, NULL, 0, &b, NULL), 503);
  free(b);
  b = NULL;
  long s = http_req(rp->http_port, "POST", "/v1/completions", JSON_HDR, COMPL, strlen(COMPL), &b, NULL);
  if (s != 503) fail_msg("%s: completion %ld %s", why, s, b ? b : "");
  if (strstr(b, "127.0.0.1")) fail_msg("%s: the 503 names an internal address: %s", why, b);
  free(b);
}

static void write_file(const char *name, const char *text) {
  FILE *f = fopen(path_of(name), "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static char *slurp(const char *name) {
  gt_rpc_creds_t c;
  gt_err_t err;
  assert_int_equal(gt_rpc_creds_load(&c, NULL, NULL, path_of(name), NULL, NULL, &err), 0);
  return c.ca; /* the file's text */
}

static int setup(void **st) {
  (void)st;
  assert_non_null(mkdtemp(g_dir));
  gt_err_t err;
  g_rs = rs_start(&err);
  if (!g_rs) fail_msg("redis: %s", err.msg);
  return 0;
}

static int teardown(void **st) {
  (void)st;
  rs_stop(g_rs);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  return system(cmd) == 0 ? 0 : -1;
}

static void test_listen_defaults_loopback(void **st) {
  (void)st;
  ep_t e;
  /* no --metrics-host: metrics on 127.0.0.1 */
  eng_start(&e, (const char *const[]){"--listen", "127.0.0.1:0", "--metrics-port", "0", NULL});
  char a[40];
  listen_addr(e.metrics_port, a);
  assert_string_equal(a, "0100007F");
  ep_stop(&e);
  /* no --listen: the default port 50051 on 127.0.0.1 (checked only when the port is free) */
  listen_addr(50051, a);
  if (a[0]) {
    print_message("port 50051 in use: default --listen not checked\n");
    return;
  }
  if (ep_start(&e, path_of("engine.log"), (const char *const[]){"--metrics-port", "-1", NULL})) {
    listen_addr(50051, a);
    if (a[0]) { /* another test run took the port meanwhile */
      print_message("port 50051 taken meanwhile: default --listen not checked\n");
      return;
    }
    fail_msg("engine did not start on the default --listen (see %s)", path_of("engine.log"));
  }
  assert_int_equal(e.grpc_port, 50051);
  listen_addr(50051, a);
  assert_string_equal(a, "0100007F");
  ep_stop(&e);
}

static void test_shared_token(void **st) {
  (void)st;
  write_file("token", "s3cret-engine-token\n");
  write_file("wrong", "not-the-token\n");
  ep_t e;
  eng_start(&e, (const char *const[]){"--listen", "127.0.0.1:0", "--metrics-port", "-1", "--auth-token-file",
                                      path_of("token"), NULL});
  /* direct calls (a client that bypasses the router): no token, a wrong one, the right one */
  assert_int_equal(direct_health(e.grpc_port, NULL), GT_RPC_UNAUTHENTICATED);
  gt_rpc_client_opts_t o = {.own_thread = 1, .auth_token = "not-the-token"};
  assert_int_equal(direct_health(e.grpc_port, &o), GT_RPC_UNAUTHENTICATED);
  o.auth_token = "s3cret-engine-token";
  assert_int_equal(direct_health(e.grpc_port, &o), GT_RPC_OK);
  /* routers */
  rp_t rp;
  start_router(&rp, e.grpc_port, (const char *const[]){"--engine-token-file", path_of("token"), NULL});
  assert_serves(&rp);
  assert_int_equal(rp_stop(&rp), 0);
  start_router(&rp, e.grpc_port, (const char *const[]){"--engine-token-file", path_of("wrong"), NULL});
  assert_refused(&rp, "wrong token");
  assert_int_equal(rp_stop(&rp), 0);
  start_router(&rp, e.grpc_port, (const char *const[]){NULL});
  assert_refused(&rp, "no token");
  assert_int_equal(rp_stop(&rp), 0);
  ep_stop(&e);
}

/* A CA, a server certificate for 127.0.0.1, a client certificate, and a client certificate of
 * another CA. 0, or 77 when the openssl command is missing. */
static int make_certs(void) {
  if (system("command -v openssl >/dev/null 2>&1") != 0) return 77;
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           "set -e; cd '%s';"
           "for ca in ca other; do openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=$ca-ca "
           "  -keyout $ca.key -out $ca.pem; done;"
           "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.ext;"
           "openssl req -newkey rsa:2048 -nodes -subj /CN=engine -keyout srv.key -out srv.csr;"
           "openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile san.ext -out srv.pem;"
           "for c in cli:ca bad:other; do n=${c%%:*}; a=${c#*:};"
           "  openssl req -newkey rsa:2048 -nodes -subj /CN=router -keyout $n.key -out $n.csr;"
           "  openssl x509 -req -in $n.csr -CA $a.pem -CAkey $a.key -CAcreateserial -days 2 -out $n.pem; done",
           g_dir);
  char full[4200];
  snprintf(full, sizeof full, "(%s) >'%s/openssl.log' 2>&1", cmd, g_dir);
  return system(full) == 0 ? 0 : -1;
}

static void test_mutual_tls(void **st) {
  (void)st;
  int rc = make_certs();
  if (rc == 77) skip();
  assert_int_equal(rc, 0);
  ep_t e;
  eng_start(&e, (const char *const[]){"--listen", "127.0.0.1:0", "--metrics-port", "-1", "--tls-cert", path_of("srv.pem"),
                                      "--tls-key", path_of("srv.key"), "--tls-client-ca", path_of("ca.pem"), NULL});
  /* direct: plaintext, TLS without a client certificate, with one of another CA, the right one */
  assert_int_equal(direct_health(e.grpc_port, NULL), GT_RPC_UNAVAILABLE);
  char *ca = slurp("ca.pem"), *cert = slurp("cli.pem"), *key = slurp("cli.key");
  char *bcert = slurp("bad.pem"), *bkey = slurp("bad.key");
  gt_rpc_client_opts_t o = {.own_thread = 1, .tls_ca_pem = ca};
  assert_int_equal(direct_health(e.grpc_port, &o), GT_RPC_UNAVAILABLE);
  o.tls_cert_pem = bcert;
  o.tls_key_pem = bkey;
  assert_int_equal(direct_health(e.grpc_port, &o), GT_RPC_UNAVAILABLE);
  o.tls_cert_pem = cert;
  o.tls_key_pem = key;
  assert_int_equal(direct_health(e.grpc_port, &o), GT_RPC_OK);
  free(ca), free(cert), free(key), free(bcert), free(bkey);
  /* routers */
  rp_t rp;
  start_router(&rp, e.grpc_port,
               (const char *const[]){"--engine-tls-ca", path_of("ca.pem"), "--engine-tls-cert", path_of("cli.pem"),
                                     "--engine-tls-key", path_of("cli.key"), NULL});
  assert_serves(&rp);
  assert_int_equal(rp_stop(&rp), 0);
  start_router(&rp, e.grpc_port, (const char *const[]){"--engine-tls-ca", path_of("ca.pem"), NULL});
  assert_refused(&rp, "no client certificate");
  assert_int_equal(rp_stop(&rp), 0);
  start_router(&rp, e.grpc_port,
               (const char *const[]){"--engine-tls-ca", path_of("ca.pem"), "--engine-tls-cert", path_of("bad.pem"),
                                     "--engine-tls-key", path_of("bad.key"), NULL});
  assert_refused(&rp, "certificate of another CA");
  assert_int_equal(rp_stop(&rp), 0);
  start_router(&rp, e.grpc_port, (const char *const[]){NULL});
  assert_refused(&rp, "plaintext router");
  assert_int_equal(rp_stop(&rp), 0);
  ep_stop(&e);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_listen_defaults_loopback),
      cmocka_unit_test(test_shared_token),
      cmocka_unit_test(test_mutual_tls),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
