/* tests/integration/test_engine_sigterm.c — the real serve binary: start-up line, /metrics,
 * SIGTERM drain (a running stream completes, new calls get UNAVAILABLE, exit 0) with one rank
 * and with --tp 2 (per-rank log line and memory metric), exit code 2 when the KV pool cannot
 * hold one full-context sequence, and exit code 1 after a tensor-parallel rank failed. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/common/testutil.h"
#include "tests/integration/engine_fixture.h"

extern char **environ;

typedef struct {
  pid_t pid;
  int out_fd, err_fd;
  int grpc_port, metrics_port;
} proc_t;

/* Spawns the serve binary with extra args; stdout / stderr to pipes. */
static void spawn_serve(proc_t *p, const char *const *extra) {
  const char *bin = tu_bin("gantry-engine");
  char model[1024];
  snprintf(model, sizeof model, "%s", tu_golden("qwen3-tiny.bf16.gguf"));
  const char *argv[32] = {bin, "serve", "--model", model, "--listen", "127.0.0.1:0", "--metrics-host", "127.0.0.1",
                          "--threads", "1"};
  int n = 10;
  for (int i = 0; extra[i]; i++) argv[n++] = extra[i];
  argv[n] = NULL;
  int out[2], err[2];
  assert_int_equal(pipe(out), 0);
  assert_int_equal(pipe(err), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  posix_spawn_file_actions_addclose(&fa, err[0]);
  assert_int_equal(posix_spawn(&p->pid, bin, &fa, NULL, (char *const *)argv, environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  close(err[1]);
  p->out_fd = out[0];
  p->err_fd = err[0];
}

/* Reads fd until it ends or timeout; returns malloc'd text. */
static char *read_all(int fd, int timeout_ms) {
  size_t cap = 1 << 16, len = 0;
  char *b = malloc(cap);
  struct pollfd pf = {.fd = fd, .events = POLLIN};
  while (poll(&pf, 1, timeout_ms) > 0) {
    if (len + 1024 > cap) b = realloc(b, cap *= 2);
    ssize_t k = read(fd, b + len, cap - len - 1);
    if (k <= 0) break;
    len += (size_t)k;
  }
  b[len] = 0;
  return b;
}

/* Waits for the "ready grpc_port=N metrics_port=M" line (bounded). */
static void wait_ready(proc_t *p) {
  char line[512];
  size_t len = 0;
  struct pollfd pf = {.fd = p->out_fd, .events = POLLIN};
  while (len < sizeof line - 1 && poll(&pf, 1, 60000) > 0) {
    ssize_t k = read(p->out_fd, line + len, 1);
    if (k <= 0) break;
    if (line[len++] == '\n') break;
  }
  line[len] = 0;
  if (sscanf(line, "ready grpc_port=%d metrics_port=%d", &p->grpc_port, &p->metrics_port) != 2) {
    char *e = read_all(p->err_fd, 100);
    print_message("no ready line: '%s'\nstderr: %s\n", line, e);
    free(e);
    fail();
  }
}

static int wait_exit(pid_t pid) {
  int st = 0;
  for (int i = 0; i < 600; i++) { /* bounded: 60 s */
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    struct pollfd none;
    poll(&none, 0, 100);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  return -1;
}

/* tp: "1" or "2" (--tp: the ranks must drain too, and log and report their memory) */
static void sigterm_drains(const char *tp) {
  proc_t p;
  const char *extra[] = {"--metrics-port", "0", "--max-model-len", "1024", "--max-num-seqs", "4", "--drain-timeout", "60",
                         "--served-model-name", "tiny \"q\"", "--tp", tp, NULL};
  spawn_serve(&p, extra);
  wait_ready(&p);
  char *body = efx_http_get(p.metrics_port, "/metrics");
  assert_non_null(body);
  /* every series carries the served name (escaped), like the router's model_name */
  assert_non_null(strstr(body, "gantry_engine_requests_running{model_name=\"tiny \\\"q\\\"\"} 0"));
  assert_non_null(strstr(body, "gantry_engine_request_success_total{model_name=\"tiny \\\"q\\\"\",finished_reason=\"stop\"} 0"));
  assert_null(strstr(body, "\ngantry_engine_requests_waiting 0"));
  char want[128];
  snprintf(want, sizeof want, "gantry_engine_memory_bytes{model_name=\"tiny \\\"q\\\"\",rank=\"%d\",kind=\"kv_cache\"}",
           atoi(tp) - 1);
  assert_non_null(strstr(body, want));
  free(body);

  efx_t f = {0};
  gt_err_t err = {0};
  assert_int_equal(efx_connect(&f, p.grpc_port, &err), GT_OK);
  Gantry__V1__InfoResponse *info = NULL;
  assert_int_equal(ec_info(f.ec, NULL, &info, NULL), GT_RPC_OK);
  assert_int_equal(info->context_length, 1024);
  assert_true(info->n_weight_types >= 1);
  protobuf_c_message_free_unpacked(&info->base, NULL);

  enum { GEN = 600 };
  int32_t ids[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  reqb_t b;
  reqb_tokens(&b, ids, 12, GEN);
  coll_t c;
  coll_init(&c);
  assert_int_equal(coll_start(&f, &c, &b.req, 120000), 0);
  assert_true(coll_wait_tokens(&c, 1, 60000) >= 1);
  assert_int_equal(kill(p.pid, SIGTERM), 0);
  /* health turns DRAINING (or the server is gone already when the stream was that quick) */
  int draining = 0;
  for (int i = 0; i < 2000 && !draining && !c.done; i++) {
    Gantry__V1__HealthResponse *h = NULL;
    if (ec_health(f.ec, &(ec_call_opts_t){.timeout_ms = 5000}, &h, NULL) != GT_RPC_OK) break;
    draining = h->status == GANTRY__V1__HEALTH_RESPONSE__STATUS__STATUS_DRAINING;
    protobuf_c_message_free_unpacked(&h->base, NULL);
  }
  if (draining) { /* a new stream is refused while the old one finishes */
    coll_t c2;
    assert_int_equal(coll_run_tokens(&f, &c2, ids, 12, 4, 30000), 0);
    assert_int_equal(c2.st.code, GT_RPC_UNAVAILABLE);
    coll_destroy(&c2);
  }
  print_message("drain observed=%d tokens at SIGTERM=%d\n", draining, c.n_ids);
  assert_true(coll_wait_done(&c, 120000));
  if (c.st.code != GT_RPC_OK) {
    char *e = read_all(p.err_fd, 2000);
    print_message("stream ended with %d '%s' after %d tokens; server log:\n%s\n", (int)c.st.code, c.st.message, c.n_ids, e);
    free(e);
  }
  assert_int_equal(c.st.code, GT_RPC_OK);
  assert_true(c.got_final);
  assert_int_equal(c.n_ids, GEN);
  assert_int_equal(c.finish, GANTRY__V1__FINISH_REASON__FINISH_REASON_LENGTH);
  coll_destroy(&c);
  ec_close(f.ec);
  assert_int_equal(wait_exit(p.pid), 0);
  char *log = read_all(p.err_fd, 1000);
  char rank_line[64];
  snprintf(rank_line, sizeof rank_line, "rank=%d ranks=%s backend=cpu weights_mib=", atoi(tp) - 1, tp);
  const char *keys[] = {"model=", "architecture=qwen3", "weight_types=", "parameters=2886400", "kv_pool_tokens=",
                        "max_concurrency_full_context=", "memory_used=", "max_num_seqs=4", "listening grpc=",
                        "draining", "shutdown complete", rank_line};
  for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
    if (!strstr(log, keys[i])) print_message("missing '%s' in:\n%s\n", keys[i], log);
    assert_non_null(strstr(log, keys[i]));
  }
  free(log);
  close(p.out_fd);
  close(p.err_fd);
}

static void test_sigterm_drains(void **state) {
  (void)state;
  sigterm_drains("1");
}

static void test_sigterm_drains_tp2(void **state) {
  (void)state;
  sigterm_drains("2");
}

/* --tp 2 with rank 1 failing on its third forward (GANTRY_TEST_TP_FAIL, a test hook of
 * cli_load_model): the running stream ends UNAVAILABLE naming the rank and serve exits 1. */
static void test_rank_failure_exits(void **state) {
  (void)state;
  setenv("GANTRY_TEST_TP_FAIL", "1:2", 1);
  proc_t p;
  const char *extra[] = {"--metrics-port", "-1", "--max-model-len", "1024", "--tp", "2", NULL};
  spawn_serve(&p, extra);
  unsetenv("GANTRY_TEST_TP_FAIL");
  wait_ready(&p);
  efx_t f = {0};
  gt_err_t err = {0};
  assert_int_equal(efx_connect(&f, p.grpc_port, &err), GT_OK);
  int32_t ids[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  coll_t c;
  assert_int_equal(coll_run_tokens(&f, &c, ids, 12, 50, 60000), 0);
  print_message("stream: %d '%s' after %d tokens\n", (int)c.st.code, c.st.message, c.n_ids);
  assert_int_equal(c.st.code, GT_RPC_UNAVAILABLE);
  assert_non_null(strstr(c.st.message, "rank 1"));
  coll_destroy(&c);
  ec_close(f.ec);
  assert_int_equal(wait_exit(p.pid), 1);
  char *log = read_all(p.err_fd, 1000);
  assert_non_null(strstr(log, "exiting: the engine failed"));
  free(log);
  close(p.out_fd);
  close(p.err_fd);
}

static void test_not_enough_memory(void **state) {
  (void)state;
  proc_t p;
  const char *extra[] = {"--metrics-port", "-1", "--kv-memory", "64K", NULL};
  spawn_serve(&p, extra);
  assert_int_equal(wait_exit(p.pid), 2);
  char *e = read_all(p.err_fd, 1000);
  assert_non_null(strstr(e, "not enough memory"));
  /* one clear error line */
  int lines = 0;
  for (char *q = e; (q = strstr(q, "error:")); q++) lines++;
  assert_int_equal(lines, 1);
  free(e);
  close(p.out_fd);
  close(p.err_fd);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_not_enough_memory),
      cmocka_unit_test(test_sigterm_drains),
      cmocka_unit_test(test_sigterm_drains_tp2),
      cmocka_unit_test(test_rank_failure_exits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
