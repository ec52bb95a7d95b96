/* tools/bench/bench_decode.c — `gantry-engine bench --device cuda` as a standalone program
 * that links only the engine core and the CUDA backend (no gRPC), so it can be carried to a GPU
 * machine by scripts/gpu/pack.sh:
 *   bench_decode --model M.gguf [--batch 1,8,32] [--prompt 512[,2048...]] [--gen 256] [--kv-dtype bf16|fp32]
 *                [--activations bf16|fp32] [--prefill-precision exact|fast] [--solo N]
 * Prints engine/models/bench.h's table (decode after a prompt of the first --prompt length; every
 * length also timed as a one-sequence prefill) and per-op profile of one decode step per batch
 * size and of one prefill per length, then the decode batch sizes that have a captured CUDA graph.
 * --activations: be_cuda_set_activations (without it GANTRY_ACTIVATIONS, else bf16);
 * --prefill-precision: be_cuda_set_prefill_precision. GANTRY_CUDA_GRAPHS=0 runs decode without
 * graphs. --solo N (the TP prediction, engine/TP.md): rank 0 of an N-way sharded model alone on the
 * GPU over the solo communicator (all-reduce a no-op, counted): one rank's share of every step, the
 * others' work and the collectives excluded; it prints "all-reduce calls per decode step". With
 * GANTRY_MODEL_LAYERS=K only the first K layers load (the per-layer slope of one file). GANTRY_GPIPE
 * (0 never, 1 always, unset auto: kernels/gemv_pipe.cuh) picks the 1..8-row K-quant products; the
 * first line says which. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend_cuda.h"
#include "engine/backend/comm.h"
#include "engine/models/bench.h"
#include "kernels/gemv_pipe.cuh" /* kc_gpipe_mode: GANTRY_GPIPE */

int main(int argc, char **argv) {
  const char *path = NULL, *batches = "1,8,32", *prompts = "512", *kv_dtype = "bf16", *precision = NULL, *act = NULL;
  int gen = 256, solo = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--model")) path = argv[i + 1];
    else if (!strcmp(argv[i], "--batch")) batches = argv[i + 1];
    else if (!strcmp(argv[i], "--prompt")) prompts = argv[i + 1];
    else if (!strcmp(argv[i], "--gen")) gen = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--kv-dtype")) kv_dtype = argv[i + 1];
    else if (!strcmp(argv[i], "--prefill-precision")) precision = argv[i + 1];
    else if (!strcmp(argv[i], "--activations")) act = argv[i + 1];
    else if (!strcmp(argv[i], "--solo")) solo = atoi(argv[i + 1]);
  }
  int b[64], nb = eb_parse_batches(batches, b, 64), maxb = 1, pl[16], np = eb_parse_list(prompts, pl, 16, 1 << 20);
  if (!path || np <= 0 || gen < 2 || nb <= 0 || (strcmp(kv_dtype, "bf16") && strcmp(kv_dtype, "fp32")) ||
      (precision && be_cuda_set_prefill_precision(precision)) || (act && be_cuda_set_activations(act)) || solo < 0 ||
      solo > BE_COMM_MAX_RANKS) {
    fprintf(stderr, "usage: bench_decode --model M.gguf [--batch 1,8,32] [--prompt 512[,2048...]] [--gen 256] "
                    "[--kv-dtype bf16|fp32] [--activations bf16|fp32] [--prefill-precision exact|fast] [--solo N]\n");
    return 2;
  }
  const int gp = kc_gpipe_mode();
  printf("activations: %s, prefill precision: %s, gemv_pipe: %s\n", be_cuda_activations(), be_cuda_prefill_precision(),
         gp == 0 ? "never (GANTRY_GPIPE=0)" : gp == 1 ? "always (GANTRY_GPIPE=1)" : "auto");
  const int prompt = pl[0];
  for (int i = 0; i < nb; i++) maxb = b[i] > maxb ? b[i] : maxb;
  for (int i = 0; i < np; i++) maxb = pl[i] > maxb ? pl[i] : maxb; /* max_tokens */
  gt_err_t err = {0};
  gguf_t *g = NULL;
  be_t *be = NULL;
  model_t *m = NULL;
  be_comm_t *comm = NULL; /* --solo: the rank's no-op communicator (outlives the backend) */
  if ((solo > 1 && be_comm_solo_create(solo, &comm, &err)) || gguf_open(path, &g, &err) ||
      be_cuda_create_rank(0, 0, comm, &be, &err) ||
      be_kv_set_type(be, strcmp(kv_dtype, "fp32") ? GT_TYPE_BF16 : GT_TYPE_F32) ||
      model_load(g, be, maxb, &m, &err)) {
    fprintf(stderr, "bench_decode: %s\n", err.msg);
    return 1;
  }
  eb_opts_t o = {.batches = b, .n_batches = nb, .prompt = prompt, .prefill = pl, .n_prefill = np, .gen = gen,
                 .copy_bytes = (size_t)2 << 30,
                 .prof_arm = be_cuda_profile_arm, .prof_get = be_cuda_profile_get};
  const long ar0 = be_comm_solo_calls(comm);
  int rc = eb_run(m, g, &o, stdout, &err);
  if (rc) fprintf(stderr, "bench_decode: %s\n", err.msg);
  if (comm) { /* every eager step and capture calls it; 2 per layer for these models */
    printf("\nsolo rank 0 of %d: %ld all-reduce calls queued in the run (%d layers: %d per decode step)\n", solo,
           be_comm_solo_calls(comm) - ar0, m->hp.n_layer, 2 * m->hp.n_layer);
  }
  be_cuda_stats_t st;
  be_cuda_get_stats(be, &st);
  char sz[256];
  printf("\ncaptured decode graph sizes: %s (captures %ld, graph steps %ld, eager steps %ld, profiled steps %ld)\n",
         be_fmt_graph_sizes(&st.captured_sizes, sz, sizeof sz), st.captures, st.graph_steps, st.eager_steps,
         st.profiled_steps);
  model_free(m);
  be_destroy(be);
  be_comm_destroy(comm);
  gguf_close(g);
  return rc ? 1 : 0;
}
