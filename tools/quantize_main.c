/* gantry-quantize IN.gguf OUT.gguf TYPE [--keep-output-bf16] [--threads N]
 * TYPE: Q8_0 | Q4_K | Q5_K | Q6_K | Q4_K_M (also F16, BF16, F32).
 * Prints one line per tensor (type decision and sizes) and the totals; one-line errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/quantize.h"

#ifndef GANTRY_VERSION /* set by cmake/20-quantize.cmake */
#define GANTRY_VERSION "unknown"
#endif

static void usage(FILE *f) {
  fprintf(f, "usage: gantry-quantize IN.gguf OUT.gguf TYPE [--keep-output-bf16] [--threads N] | --version\n"
             "  TYPE: Q8_0 | Q4_K | Q5_K | Q6_K | Q4_K_M | F16 | BF16 | F32\n");
}

static void on_tensor(void *ud, int64_t i, int64_t n, const char *name, uint32_t n_dims,
                      const int64_t *ne, gt_type_t from, gt_type_t to, uint64_t bytes_in,
                      uint64_t bytes_out) {
  (void)ud;
  char shape[96];
  int k = snprintf(shape, sizeof shape, "[");
  for (uint32_t d = 0; d < n_dims && k < (int)sizeof shape; d++)
    k += snprintf(shape + k, sizeof shape - (size_t)k, "%s%lld", d ? ", " : "", (long long)ne[d]);
  if (k < (int)sizeof shape) snprintf(shape + k, sizeof shape - (size_t)k, "]");
  printf("[%4lld/%4lld] %-40s %-22s %5s -> %-5s %10.3f MiB -> %10.3f MiB\n", (long long)(i + 1),
         (long long)n, name, shape, dt_name(from), dt_name(to), bytes_in / 1048576.0,
         bytes_out / 1048576.0);
  fflush(stdout);
}

int main(int argc, char **argv) {
  const char *pos[3] = {0};
  int npos = 0;
  qz_opts_t o = {.flags = 0, .n_threads = 1, .on_tensor = on_tensor};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--keep-output-bf16") == 0) {
      o.flags |= QZ_KEEP_OUTPUT_BF16;
    } else if (strcmp(argv[i], "--threads") == 0) {
      char *end = NULL;
      if (i + 1 >= argc) {
        fprintf(stderr, "gantry-quantize: --threads needs a number\n");
        return 2;
      }
      long v = strtol(argv[++i], &end, 10);
      if (!end || *end || v < 1 || v > 256) {
        fprintf(stderr, "gantry-quantize: --threads must be 1..256, got '%s'\n", argv[i]);
        return 2;
      }
      o.n_threads = (int)v;
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(argv[i], "--version") == 0) {
      printf("gantry-quantize %s\n", GANTRY_VERSION);
      return 0;
    } else if (argv[i][0] == '-' && argv[i][1]) {
      fprintf(stderr, "gantry-quantize: unknown option '%s'\n", argv[i]);
      return 2;
    } else if (npos < 3) {
      pos[npos++] = argv[i];
    } else {
      fprintf(stderr, "gantry-quantize: unexpected argument '%s'\n", argv[i]);
      return 2;
    }
  }
  if (npos != 3) {
    usage(stderr);
    return 2;
  }
  qz_mix_t mix;
  if (qz_mix_from_name(pos[2], &mix) != GT_OK) {
    fprintf(stderr, "gantry-quantize: unknown TYPE '%s' (Q8_0, Q4_K, Q5_K, Q6_K, Q4_K_M, F16, BF16, F32)\n", pos[2]);
    return 2;
  }
  if (strcmp(pos[0], pos[1]) == 0) {
    fprintf(stderr, "gantry-quantize: input and output are the same file\n");
    return 2;
  }
  gt_err_t err = {0};
  qz_stats_t st = {0};
  int rc = qz_quantize_file(pos[0], pos[1], mix, &o, &st, &err);
  if (rc != GT_OK) {
    fprintf(stderr, "gantry-quantize: %s (%s)\n", err.msg[0] ? err.msg : "failed", gt_err_name(rc));
    return 1;
  }
  printf("type %s: %lld tensors, tensor data %.3f MiB -> %.3f MiB, file %llu bytes\n",
         qz_mix_name(mix), (long long)st.n_tensors, st.bytes_in / 1048576.0,
         st.bytes_out / 1048576.0, (unsigned long long)st.file_bytes);
  return 0;
}
