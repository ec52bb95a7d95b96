/* gantry-engine bench — decode benchmark of a model on a backend (engine/models/bench.h); on CUDA
 * with the per-op profile of one decode step per batch size. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "engine/models/bench.h"
#include "engine/cli/cli.h"
#include "engine/sched/sched_mem.h"
#ifdef GANTRY_HAVE_CUDA
#include "engine/backend/backend_cuda.h"
#endif

int cmd_bench(int argc, char **argv) {
  static const struct option opts[] = {{"model", 1, 0, 'm'}, {"device", 1, 0, 'D'}, {"batch", 1, 0, 'b'},
                                       {"prompt", 1, 0, 'p'}, {"gen", 1, 0, 'g'},   {"threads", 1, 0, 'j'},
                                       {"kv-dtype", 1, 0, 'K'}, {"prefill-precision", 1, 0, 'P'},
                                       {"activations", 1, 0, 'A'},
                                       {"help", 0, 0, 'h'},     CLI_TP_OPTS,
                                       {0, 0, 0, 0}};
  const char *model = NULL, *device = "cpu", *batches = "1,8,32", *prompts = "512", *kv_dtype = NULL;
  long gen = 256, threads = 0;
  cli_tp_t tp = {.tp = 1};
  optind = 1;
  for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
    int t = cli_tp_opt(c, optarg, &tp);
    if (t < 0) return 2;
    if (t) continue;
    switch (c) {
      case 'm': model = optarg; break;
      case 'D': device = optarg; break;
      case 'b': batches = optarg; break;
      case 'K': if (cli_kv_dtype(NULL, optarg)) return 2; kv_dtype = optarg; break;
      case 'P': if (cli_prefill_precision(optarg)) return 2; break;
      case 'A': if (cli_activations(optarg)) return 2; break;
      case 'p': prompts = optarg; break;
      case 'g': if (cli_int("--gen", optarg, 2, 1 << 20, &gen)) return 2; break;
      case 'j': if (cli_int("--threads", optarg, 1, 1024, &threads)) return 2; break;
      case 'h':
        fputs("usage: gantry-engine bench --model M.gguf [--device cpu|cuda] [--batch 1,8,32] [--prompt 512[,2048...]] "
             "[--gen 256] [--threads N] [--kv-dtype bf16|fp32] [--activations bf16|fp32] [--prefill-precision exact|fast] [--tp N]\n  decode "
             "after a prompt of the first --prompt length; every length is also timed as a one-sequence prefill (on "
             "CUDA with a per-op profile)\n" CLI_TP_HELP, stdout);
        return 0;
      default: return 2;
    }
  }
  int b[64];
  int nb = eb_parse_batches(batches, b, 64);
  if (nb <= 0) return cli_fail("--batch expects sizes like 1,8,32, got '%s'", batches), 2;
  int pl[16], np = eb_parse_list(prompts, pl, 16, 1 << 20);
  if (np <= 0) return cli_fail("--prompt expects lengths like 512,2048, got '%s'", prompts), 2;
  int max_batch = 1, max_prompt = 1;
  for (int i = 0; i < nb; i++) max_batch = b[i] > max_batch ? b[i] : max_batch;
  for (int i = 0; i < np; i++) max_prompt = pl[i] > max_prompt ? pl[i] : max_prompt;
  const int maxb = max_batch > max_prompt ? max_batch : max_prompt; /* max_tokens */
  cli_model_t cm;
  if (cli_open_model(model, device, (int)threads, &tp, maxb, &cm)) return 1;
  if (cli_kv_dtype(cm.be, kv_dtype)) {
    cli_close_model(&cm);
    return 1;
  }
  const int on_cuda = !strcmp(cm.model->be->ops->name, "cuda");
  eb_opts_t o = {.batches = b, .n_batches = nb, .prompt = pl[0], .prefill = pl, .n_prefill = np, .gen = (int)gen,
                 .copy_bytes = (size_t)(on_cuda ? 2048u : 256u) << 20};
#ifdef GANTRY_HAVE_CUDA
  /* per-op profile of one decode step per batch size and of one prefill per length; not for a
   * group of CUDA ranks (its backend is the group's, not a CUDA backend) */
  if (on_cuda && !cm.model->tp) {
    o.prof_arm = be_cuda_profile_arm;
    o.prof_get = be_cuda_profile_get;
  }
  if (strncmp(device, "cuda", 4) == 0)
    printf("activations: %s, prefill precision: %s\n", be_cuda_activations(), be_cuda_prefill_precision());
#endif
  gt_err_t err = {0};
  /* eb_run's pool: the largest batch of sequences of the longest prompt + gen tokens and one more
   * block, 16-token blocks */
  int rc = sched_mem_check(cm.model, max_batch * (int)((max_prompt + gen + 15) / 16 + 1), 16, max_batch, &err);
  if (!rc) rc = eb_run(cm.model, cm.gguf, &o, stdout, &err);
  if (rc) cli_fail("%s", err.msg);
  cli_close_model(&cm);
  return rc ? 1 : 0;
}
