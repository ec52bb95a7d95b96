/* gantry-engine generate — streams a completion of a prompt (or a one-turn chat) to stdout and
 * ends with one statistics line on stderr. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "engine/cli/cli.h"
#include "engine/chat/prompt.h"
#include "engine/models/gen.h"
#include "engine/backend/sampler.h"
#include "engine/sched/sched_mem.h"
#include "format/tokenizer.h"

static void usage(void) {
  fputs("usage: gantry-engine generate --model M.gguf (--prompt TEXT | --chat TEXT) [options]\n"
        "  --max-tokens N          tokens to generate (default 128)\n"
        "  --system TEXT           system message (with --chat)\n"
        "  --no-think              chat with enable_thinking = false\n"
        "  --temperature T         0 = greedy (default 0)\n"
        "  --top-k K  --top-p P  --min-p P\n"
        "  --repetition-penalty R  --presence-penalty P  --frequency-penalty F\n"
        "  --seed S                sampling seed (default 0)\n"
        "  --ignore-eos            do not stop at end-of-sequence tokens\n"
        "  --special               parse special tokens in --prompt text\n"
        "  --threads N             CPU threads (default: every core)\n"
        "  --device D              cpu (default), cuda or cuda:N\n"
        CLI_TP_HELP
        CLI_KV_DTYPE_HELP CLI_ACTIVATIONS_HELP,
        stdout);
}

int cmd_generate(int argc, char **argv) {
  static const struct option opts[] = {
      {"model", 1, 0, 'm'},       {"prompt", 1, 0, 'p'},      {"chat", 1, 0, 'c'},
      {"max-tokens", 1, 0, 'n'},  {"temperature", 1, 0, 't'}, {"top-k", 1, 0, 'k'},
      {"top-p", 1, 0, 'P'},       {"min-p", 1, 0, 'M'},       {"repetition-penalty", 1, 0, 'r'},
      {"presence-penalty", 1, 0, 'e'}, {"frequency-penalty", 1, 0, 'f'}, {"seed", 1, 0, 's'},
      {"ignore-eos", 0, 0, 'i'},  {"threads", 1, 0, 'j'}, {"device", 1, 0, 'D'},     {"system", 1, 0, 'S'},
      {"no-think", 0, 0, 'T'},    {"special", 0, 0, 'x'},     {"help", 0, 0, 'h'},      {"kv-dtype", 1, 0, 'K'},
      {"activations", 1, 0, 'A'}, CLI_TP_OPTS,
      {0, 0, 0, 0}};
  const char *model = NULL;
  prompt_spec_t ps = {0};
  long max_tokens = 128, threads = 0, v;
  const char *device = "cpu", *kv_dtype = NULL;
  double f;
  int ignore_eos = 0;
  sampler_params_t sp = sampler_defaults();
  cli_tp_t tp = {.tp = 1};
  optind = 1;
  for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
    int t = cli_tp_opt(c, optarg, &tp);
    if (t < 0) return 2;
    if (t) continue;
    switch (c) {
      case 'm': model = optarg; break;
      case 'p': ps.prompt = optarg; break;
      case 'c': ps.chat = optarg; break;
      case 'S': ps.system = optarg; break;
      case 'T': ps.no_think = 1; break;
      case 'x': ps.special = 1; break;
      case 'i': ignore_eos = 1; break;
      case 'n': if (cli_int("--max-tokens", optarg, 1, 1 << 24, &max_tokens)) return 2; break;
      case 'D': device = optarg; break;
      case 'K': if (cli_kv_dtype(NULL, optarg)) return 2; kv_dtype = optarg; break;
      case 'A': if (cli_activations(optarg)) return 2; break;
      case 'j': if (cli_int("--threads", optarg, 1, 1024, &threads)) return 2; break;
      case 'k': if (cli_int("--top-k", optarg, -1, 1 << 30, &v)) return 2; sp.top_k = (int)v; break;
      case 's': if (cli_int("--seed", optarg, 0, __LONG_MAX__, &v)) return 2; sp.seed = (uint64_t)v; break;
      case 't': if (cli_float("--temperature", optarg, 0, 100, &f)) return 2; sp.temperature = (float)f; break;
      case 'P': if (cli_float("--top-p", optarg, 0, 1, &f)) return 2; sp.top_p = (float)f; break;
      case 'M': if (cli_float("--min-p", optarg, 0, 1, &f)) return 2; sp.min_p = (float)f; break;
      case 'r': if (cli_float("--repetition-penalty", optarg, 0, 10, &f)) return 2; sp.repetition_penalty = (float)f; break;
      case 'e': if (cli_float("--presence-penalty", optarg, -2, 2, &f)) return 2; sp.presence_penalty = (float)f; break;
      case 'f': if (cli_float("--frequency-penalty", optarg, -2, 2, &f)) return 2; sp.frequency_penalty = (float)f; break;
      case 'h': usage(); return 0;
      default: return 2;
    }
  }
  if (!model) return cli_fail("--model is required"), 2;
  if (!ps.prompt == !ps.chat) return cli_fail("give exactly one of --prompt and --chat"), 2;
  gt_err_t err = {0};
  if (sampler_check(&sp, &err)) return cli_fail("%s", err.msg), 2;

  cli_model_t cm;
  if (cli_open_model(model, device, (int)threads, &tp, 512, &cm)) return 1;
  if (cli_kv_dtype(cm.be, kv_dtype)) {
    cli_close_model(&cm);
    return 1;
  }
  int rc = 1;
  tok_t *tok = NULL;
  int32_t *ids = NULL;
  size_t n_ids = 0;
  gen_t *gen = NULL;
  sampler_t *smp = NULL;
  float *logits = NULL;
  tok_stream_t ts = {0};
  const model_hparams_t *hp = &cm.model->hp;
  if (tok_load(cm.gguf, &tok, &err)) {
    cli_fail("%s: tokenizer: %s", model, err.msg);
    goto out;
  }
  if (prompt_build(cm.gguf, tok, &ps, &ids, &n_ids, &err)) {
    cli_fail("%s", err.msg);
    goto out;
  }
  if (n_ids == 0) {
    cli_fail("the prompt is empty");
    goto out;
  }
  if ((long)n_ids + max_tokens > hp->n_ctx_train) {
    if ((long)n_ids >= hp->n_ctx_train) {
      cli_fail("prompt of %zu tokens does not fit the context of %d tokens", n_ids, hp->n_ctx_train);
      goto out;
    }
    max_tokens = hp->n_ctx_train - (long)n_ids;
  }
  const int n_ctx = (int)(n_ids + (size_t)max_tokens);
  if (sched_mem_check(cm.model, (n_ctx + GEN_BLOCK_TOKENS - 1) / GEN_BLOCK_TOKENS, GEN_BLOCK_TOKENS, 1, &err) ||
      gen_create(cm.model, n_ctx, &gen, &err) ||
      sampler_create(&sp, hp->n_vocab, &smp, &err)) {
    cli_fail("%s", err.msg);
    goto out;
  }
  logits = malloc(sizeof(float) * (size_t)hp->n_vocab);
  for (size_t i = 0; i < n_ids; i++) sampler_accept(smp, ids[i], 0);
  int32_t stops[4] = {tok_eos(tok), tok_eot(tok), tok_find(tok, "<|im_end|>"), tok_find(tok, "<|endoftext|>")};

  /* sampling on the backend when nothing needs the logits on the host: only ids come back */
  const int on_dev = cm.model->be->ops->sample && !sampler_has_penalties(&sp);
  be_sample_row_t row = {.temperature = sp.temperature, .top_k = sp.top_k, .top_p = sp.top_p, .min_p = sp.min_p};
  int32_t next = -1, fed;
  double t0 = gt_now_ms();
  if (on_dev) row.u = sampler_next_u(smp);
  if (on_dev ? gen_feed_sample(gen, ids, (int)n_ids, 0, &row, &next, &err)
             : gen_feed(gen, ids, (int)n_ids, 0, NULL, logits, &err)) {
    cli_fail("prefill: %s", err.msg);
    goto out;
  }
  double t_prefill = gt_now_ms() - t0, t_dec0 = gt_now_ms();
  long n_gen = 0;
  tok_stream_init(&ts, tok, TOK_SKIP_CONTROL);
  while (n_gen < max_tokens) {
    if (!on_dev) next = sampler_sample(smp, logits);
    sampler_accept(smp, next, 1);
    n_gen++;
    int is_stop = 0;
    for (int i = 0; i < 4; i++) is_stop |= stops[i] >= 0 && next == stops[i];
    if (is_stop && !ignore_eos) break;
    const char *text;
    size_t len;
    if (tok_stream_push(&ts, next, &text, &len, &err)) {
      cli_fail("decode: %s", err.msg);
      goto out;
    }
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    if (n_gen == max_tokens) break;
    fed = next;
    if (on_dev) row.u = sampler_next_u(smp);
    if (on_dev ? gen_feed_sample(gen, &fed, 1, 1, &row, &next, &err) : gen_feed(gen, &fed, 1, 1, NULL, logits, &err)) {
      cli_fail("decode: %s", err.msg);
      goto out;
    }
  }
  const char *text;
  size_t len;
  if (!tok_stream_flush(&ts, &text, &len, &err)) fwrite(text, 1, len, stdout);
  fputc('\n', stdout);
  fflush(stdout);
  double t_dec = gt_now_ms() - t_dec0;
  fprintf(stderr, "prompt_tokens=%zu generated_tokens=%ld prefill_ms=%.1f prefill_tok_s=%.1f decode_tok_s=%.1f\n",
          n_ids, n_gen, t_prefill, n_ids / (t_prefill / 1e3), n_gen > 1 ? (n_gen - 1) / (t_dec / 1e3) : 0.0);
  rc = 0;
out:
  tok_stream_free(&ts);
  free(logits);
  sampler_free(smp);
  gen_free(gen);
  free(ids);
  tok_free(tok);
  cli_close_model(&cm);
  return rc;
}
