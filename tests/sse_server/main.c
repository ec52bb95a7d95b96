/* tests/sse_server/main.c — gantry-sse-server SCRIPT.json: serves a script (see sse_server.h)
 * on a free loopback port, prints "port N" on stdout and runs until SIGINT or SIGTERM. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "tests/sse_server/sse_server.h"

static volatile sig_atomic_t stop;
static void on_sig(int s) { (void)s, stop = 1; }

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s SCRIPT.json\n", argv[0]);
    return 2;
  }
  FILE *f = fopen(argv[1], "rb");
  if (!f) {
    perror(argv[1]);
    return 1;
  }
  static char buf[1 << 22];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  gt_err_t err = {0};
  sse_srv_t *s = sse_srv_start(buf, &err);
  if (!s) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  printf("port %d\n", sse_srv_port(s));
  fflush(stdout);
  struct sigaction sa = {0};
  sa.sa_handler = on_sig;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  while (!stop) pause();
  sse_srv_stop(s);
  return 0;
}
