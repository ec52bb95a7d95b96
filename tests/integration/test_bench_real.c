/* tests/integration/test_bench_real.c — `gantry bench` against a real gantry router + engine
 * (CPU, tiny model): the cold/warm difference must show in the server-reported cached-token
 * column. Needs a running stack: GANTRY_ROUTER_URL (e.g. http://127.0.0.1:8080), optional
 * GANTRY_MODEL and GANTRY_API_KEY. Without GANTRY_ROUTER_URL it skips (exit 77, which ctest
 * reports as skipped). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/testutil.h"

static void test_cold_warm_cached_tokens(void **st) {
  (void)st;
  const char *url = getenv("GANTRY_ROUTER_URL");
  if (!url || !*url) {
    print_message("GANTRY_ROUTER_URL is not set: no router + engine to run against, skipping\n");
    skip();
  }
  char dir[] = "/tmp/gantry-bench-real-XXXXXX";
  assert_non_null(mkdtemp(dir));
  const char *model = getenv("GANTRY_MODEL"), *key = getenv("GANTRY_API_KEY");
  char cmd[2048], *out = NULL;
  snprintf(cmd, sizeof cmd,
           "%s --url '%s' %s%s%s bench --contexts 256 --concurrency 1,2 --requests-per-user 2 --max-tokens 8 "
           "--timeout-s 300 %s%s%s --out %s",
           tu_bin("gantry"), url, key ? "--api-key '" : "", key ? key : "", key ? "'" : "", model ? "--model '" : "",
           model ? model : "", model ? "'" : "", dir);
  int rc = tu_run(cmd, &out);
  print_message("%s", out ? out : "");
  if (rc != 0) fail_msg("gantry bench exit %d", rc);
  free(out);
  char path[128];
  snprintf(path, sizeof path, "%s/results.json", dir);
  json_error_t je;
  json_t *res = json_load_file(path, 0, &je);
  if (!res) fail_msg("%s: %s", path, je.text);
  json_t *cells = json_object_get(res, "cells"), *c;
  assert_int_equal(json_array_size(cells), 4);
  size_t i;
  json_array_foreach(cells, i, c) {
    int warm = !strcmp(json_string_value(json_object_get(c, "mode")), "warm");
    assert_int_equal(json_integer_value(json_object_get(c, "errors")), 0);
    json_t *hit = json_object_get(c, "prefix_hit_pct");
    if (!json_is_number(hit)) fail_msg("cell %zu: the server reported no cached_tokens", i);
    double h = json_number_value(hit);
    /* cold: a unique first line, so no 16-token block can match; warm: the whole prompt but
     * its last partial block is cached */
    if (warm ? h < 50 : h > 10) fail_msg("cell %zu (%s): prefix hit %.1f%%", i, warm ? "warm" : "cold", h);
  }
  json_t *reqs = json_object_get(res, "requests"), *r;
  json_array_foreach(reqs, i, r) {
    json_t *cell = json_array_get(cells, (size_t)json_integer_value(json_object_get(r, "cell")));
    int warm = !strcmp(json_string_value(json_object_get(cell, "mode")), "warm");
    json_int_t cached = json_integer_value(json_object_get(r, "cached_tokens"));
    if (warm) assert_true(cached > 0);
  }
  json_decref(res);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}


/* Runs `gantry --url URL [--api-key K] ARGS` (stdout into *out); returns the exit status. */
static int gantry_at(const char *url, const char *args, char **out) {
  const char *key = getenv("GANTRY_API_KEY");
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "%s --url '%s' %s%s%s %s", tu_bin("gantry"), url, key ? "--api-key '" : "", key ? key : "",
           key ? "'" : "", args);
  return tu_run(cmd, out);
}

/* The router's max_inflight cap, not the engine, holds the streams: with the pool capped at
 * 1 and 4 streams offered, the bench must say so from the router's own admission wait
 * (/metrics), and say the server worked on about one stream. The cap is put back after. */
static void test_cap_limited_note(void **st) {
  (void)st;
  const char *url = getenv("GANTRY_ROUTER_URL");
  if (!url || !*url) skip();
  const char *model = getenv("GANTRY_MODEL") ? getenv("GANTRY_MODEL") : "demo";
  char args[1024], *out = NULL;
  snprintf(args, sizeof args, "limits get --model '%s'", model);
  assert_int_equal(gantry_at(url, args, &out), 0);
  json_t *lim = json_loads(out, 0, NULL);
  free(out);
  json_t *one = json_is_array(lim) ? json_array_get(lim, 0) : lim;
  json_t *mi = json_object_get(one, "max_inflight");
  if (!json_is_integer(mi)) fail_msg("limits get: no max_inflight for %s", model);
  json_int_t before = json_integer_value(mi);
  json_decref(lim);
  snprintf(args, sizeof args, "limits set --model '%s' --max-inflight 1", model);
  assert_int_equal(gantry_at(url, args, &out), 0);
  free(out);
  char dir[] = "/tmp/gantry-bench-cap-XXXXXX";
  assert_non_null(mkdtemp(dir));
  snprintf(args, sizeof args,
           "bench --model '%s' --contexts 64 --cold --concurrency 4 --requests-per-user 2 --max-tokens 24 "
           "--timeout-s 300 --out %s", model, dir);
  int rc = gantry_at(url, args, &out);
  print_message("%s", out ? out : "");
  char restore[256];
  snprintf(restore, sizeof restore, "limits set --model '%s' --max-inflight %lld", model, (long long)before);
  char *rout = NULL;
  int rrc = gantry_at(url, restore, &rout);
  free(rout);
  if (rc != 0) fail_msg("gantry bench exit %d", rc);
  assert_int_equal(rrc, 0);
  assert_non_null(strstr(out, "QUEUED"));
  assert_non_null(strstr(out, "in the router's admission queue (a max_inflight cap)"));
  free(out);
  char path[128];
  snprintf(path, sizeof path, "%s/results.json", dir);
  json_t *res = json_load_file(path, 0, NULL);
  assert_non_null(res);
  json_t *c = json_array_get(json_object_get(res, "cells"), 0);
  assert_true(json_is_true(json_object_get(c, "cap_limited")));
  assert_string_equal(json_string_value(json_object_get(c, "srv_queue_source")), "gantry_router_admission_wait_seconds");
  double srv = json_real_value(json_object_get(c, "server_inflight")), cli = json_real_value(json_object_get(c, "client_inflight"));
  print_message("client kept %.2f streams open, the server worked on %.2f\n", cli, srv);
  if (!(srv < 1.5 && cli > 2)) fail_msg("client %.2f, server %.2f streams", cli, srv);
  json_decref(res);
  snprintf(args, sizeof args, "rm -rf %s", dir);
  assert_int_equal(system(args), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_cold_warm_cached_tokens),
                                     cmocka_unit_test(test_cap_limited_note)};
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  const char *url = getenv("GANTRY_ROUTER_URL");
  return rc == 0 && (!url || !*url) ? 77 : rc;
}
