/* tests/integration/fake_engine_main.c — gantry-fake-engine: the scripted fake Engine of
 * router_harness.h as a process (for the node e2e tests when no real engine is wanted).
 * Prints "port N" on stdout once listening; exits on SIGTERM/SIGINT. Test-only. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tests/integration/router_harness.h"

static volatile sig_atomic_t g_stop;
static void on_sig(int s) { (void)s; g_stop = 1; }

int main(int argc, char **argv) {
  const char *name = argc > 1 ? argv[1] : "B";
  signal(SIGTERM, on_sig);
  signal(SIGINT, on_sig);
  fe_t *f = fe_start(name);
  if (!f) {
    fprintf(stderr, "gantry-fake-engine: cannot start\n");
    return 1;
  }
  printf("port %d\n", fe_port(f));
  fflush(stdout);
  while (!g_stop) pause();
  fe_stop(f);
  return 0;
}
