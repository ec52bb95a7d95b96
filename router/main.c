/* router/main.c — gantry-router: parses the command line and runs the router (router.c), or the
 * `register` heartbeat sidecar (register_cmd.c). */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "common/fdlimit.h"
#include "common/log.h"
#include "router/router.h"

int main(int argc, char **argv) {
  gt_log_init_from_env();
  signal(SIGPIPE, SIG_IGN);
  gt_raise_nofile(); /* every HTTP/gRPC client holds a descriptor */
  if (argc > 1 && !strcmp(argv[1], "register")) return registry_sidecar(argc, argv);
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--version")) {
      printf("gantry-router %s\n", GANTRY_VERSION);
      return 0;
    }
  static rt_config_t cfg;
  gt_err_t err = {0};
  bool help;
  rt_config_defaults(&cfg);
  if (rt_config_parse(&cfg, argc, argv, &help, &err)) {
    fprintf(stderr, "gantry-router: %s\n%s", err.msg, rt_usage());
    return 2;
  }
  if (help) {
    fputs(rt_usage(), stdout);
    return 0;
  }
  router_t *rt = rt_create(&cfg, &err);
  if (!rt) {
    fprintf(stderr, "gantry-router: %s\n", err.msg);
    return 1;
  }
  rt_run(rt);
  rt_destroy(rt);
  return 0;
}
