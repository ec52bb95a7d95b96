/* router/register_cmd.c — `gantry-router register`: a heartbeat sidecar for one engine. Every
 * interval it checks the engine with a Health RPC and, while the engine answers READY, writes
 * HSET <prefix>engines MODEL=HOST:PORT <unix ms>; on SIGTERM/SIGINT it removes the entry. Runs
 * beside an engine (systemd unit or container sidecar); routers pick the engine up by
 * themselves. */
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/engine_client.h"
#include "common/log.h"
#include "router/redis_sentinel.h"
#include "router/registry.h"
#include "router/router.h"

static volatile sig_atomic_t g_stop;
static void on_sig(int s) { (void)s; g_stop = 1; }

int registry_sidecar(int argc, char **argv) {
  rt_config_t c;
  rt_config_defaults(&c);
  long interval = 2000;
  /* reuse the router's parser for --redis/--engine/--key-prefix; --interval-ms is ours */
  char *args[64];
  int n = 0;
  args[n++] = argv[0];
  for (int i = 2; i < argc && n < 62; i++) {
    if (!strcmp(argv[i], "--interval-ms") && i + 1 < argc) {
      interval = strtol(argv[++i], NULL, 10);
      continue;
    }
    args[n++] = argv[i];
  }
  bool help;
  gt_err_t err;
  if (rt_config_parse(&c, n, args, &help, &err) || help || c.n_engines != 1 || interval < 100) {
    fprintf(stderr, "usage: gantry-router register (--redis redis://HOST:PORT | --redis-sentinel H:P,... [--redis-master-name N]) --engine MODEL=HOST:PORT [--interval-ms MS >= 100] [--key-prefix P]\n%s%s\n",
            help ? "" : "gantry-router register: ", help ? "" : (c.n_engines != 1 ? "exactly one --engine" : err.msg));
    return 2;
  }
  signal(SIGTERM, on_sig);
  signal(SIGINT, on_sig);
  char key[128], field[400];
  snprintf(key, sizeof key, "%sengines", c.key_prefix);
  snprintf(field, sizeof field, "%s=%s", c.engines[0].model, c.engines[0].target);
  ec_client_t *ec;
  gt_rpc_creds_t cr;
  if (gt_rpc_creds_load(&cr, c.engine_token_file, getenv("GANTRY_ENGINE_TOKEN"), c.engine_tls_ca, c.engine_tls_cert,
                        c.engine_tls_key, &err)) {
    fprintf(stderr, "gantry-router register: %s\n", err.msg);
    return 1;
  }
  gt_rpc_client_opts_t eo = {.own_thread = 1};
  pool_engine_opts(&cr, c.engine_tls_name, &eo);
  int orc = ec_open(c.engines[0].target, &eo, &ec, &err);
  gt_rpc_creds_free(&cr); /* the channel holds its own copies */
  if (orc) {
    fprintf(stderr, "gantry-router register: %s\n", err.msg);
    return 1;
  }
  redisContext *r = NULL;
  GT_LOG_INFO("register engine %s in redis %s:%d sentinels=%s key=%s every %ld ms", field, c.redis_host, c.redis_port,
              c.redis_sentinels[0] ? c.redis_sentinels : "-", key, interval);
  while (!g_stop) {
    if (!r || r->err) {
      if (r) redisFree(r);
      r = NULL;
      struct timeval tv = {1, 0};
      gt_err_t se = {0};
      if (!c.redis_sentinels[0] || rsent_resolve(c.redis_sentinels, c.redis_master_name, 200, NULL, 0,
                                                 c.redis_host, sizeof c.redis_host, &c.redis_port, &se) == GT_OK)
        r = redisConnectWithTimeout(c.redis_host, c.redis_port, tv);
      else
        GT_LOG_WARN("register: %s", se.msg);
    }
    Gantry__V1__HealthResponse *h = NULL;
    ec_call_opts_t o = {.timeout_ms = interval};
    bool ready = ec_health(ec, &o, &h, NULL) == GT_RPC_OK && h->status == GANTRY__V1__HEALTH_RESPONSE__STATUS__STATUS_READY;
    if (h) protobuf_c_message_free_unpacked(&h->base, NULL);
    if (ready && r && !r->err) {
      struct timeval now;
      gettimeofday(&now, NULL);
      redisReply *rep = redisCommand(r, "HSET %s %s %lld", key, field, (long long)now.tv_sec * 1000 + now.tv_usec / 1000);
      bool demoted = rep && rep->type == REDIS_REPLY_ERROR && !strncmp(rep->str, "READONLY", 8);
      if (rep) freeReplyObject(rep);
      if (demoted) { /* a replica now (Sentinel failover): reconnect to the new master */
        redisFree(r);
        r = NULL;
      }
    }
    for (long t = 0; t < interval && !g_stop; t += 50) usleep(50000);
  }
  if (r && !r->err) {
    redisReply *rep = redisCommand(r, "HDEL %s %s", key, field);
    if (rep) freeReplyObject(rep);
  }
  if (r) redisFree(r);
  ec_close(ec);
  GT_LOG_INFO("unregistered engine %s", field);
  return 0;
}
