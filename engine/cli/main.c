/* gantry-engine — one model on the CPU (now) or GPUs (later): generate, eval, info, tokenize, serve. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fdlimit.h"
#include "common/log.h"
#include "engine/cli/cli.h"

static void usage(FILE *f) {
  fputs("usage: gantry-engine <command> [options]\n"
        "commands:\n"
        "  generate   --model M.gguf (--prompt TEXT | --chat TEXT) [--max-tokens N] [sampling flags]\n"
        "  eval       --model M.gguf (--ids 1,2,3 | --ids-file F) --logits-out F.f32\n"
        "  info       --model M.gguf\n"
        "  tokenize   --model M.gguf --text T [--special]\n"
        "  detokenize --model M.gguf --ids 1,2,3\n"
        "  serve      --model M.gguf --listen HOST:PORT --metrics-port N [--max-num-seqs N] [--kv-memory SIZE]\n"
        "  bench      --model M.gguf [--device cpu|cuda] [--batch 1,8,32] [--prompt 512] [--gen 256]\n"
        "run 'gantry-engine <command> --help' for a command's options\n",
        f);
}

#ifndef GANTRY_VERSION /* set by cmake/90-install.cmake */
#define GANTRY_VERSION "unknown"
#endif

int main(int argc, char **argv) {
  /* OpenMP threads that spin while waiting collapse throughput (100x measured) as soon as
   * another process wants the cores; sleeping waits cost little. Set before any parallel region. */
  setenv("OMP_WAIT_POLICY", "passive", 0);
  gt_log_init_from_env();
  gt_raise_nofile(); /* serve: one descriptor per gRPC / metrics client */
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("gantry-engine %s\n", GANTRY_VERSION);
    return 0;
  }
  const char *cmd = argv[1];
  argc--, argv++;
  if (!strcmp(cmd, "generate")) return cmd_generate(argc, argv);
  if (!strcmp(cmd, "eval")) return cmd_eval(argc, argv);
  if (!strcmp(cmd, "info")) return cmd_info(argc, argv);
  if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc, argv);
  if (!strcmp(cmd, "detokenize")) return cmd_detokenize(argc, argv);
  if (!strcmp(cmd, "serve")) return cmd_serve(argc, argv);
  if (!strcmp(cmd, "bench")) return cmd_bench(argc, argv);
  cli_fail("unknown command '%s'", cmd);
  usage(stderr);
  return 2;
}
