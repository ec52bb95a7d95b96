/* gantry-engine-serve — `gantry-engine serve` as its own program, until engine/cli/main.c
 * dispatches "serve" to cmd_serve (engine/cli/cmd_serve.c). */
#include "common/log.h"

int cmd_serve(int argc, char **argv);

int main(int argc, char **argv) {
  gt_log_init_from_env();
  return cmd_serve(argc, argv);
}
