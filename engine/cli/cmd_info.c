/* gantry-engine info — architecture, hyperparameters, tensor types, sizes; no weights loaded. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "engine/cli/cli.h"
#include "format/tokenizer.h"

int cmd_info(int argc, char **argv) {
  static const struct option opts[] = {{"model", 1, 0, 'm'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
  const char *path = NULL;
  optind = 1;
  for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
    if (c == 'm') path = optarg;
    else if (c == 'h') return puts("usage: gantry-engine info --model M.gguf"), 0;
    else return 2;
  }
  if (!path) return cli_fail("--model is required"), 2;
  gt_err_t err = {0};
  gguf_t *g = NULL;
  if (gguf_open(path, &g, &err)) return cli_fail("%s", err.msg);
  model_hparams_t hp;
  if (model_read_hparams(g, &hp, &err)) {
    gguf_close(g);
    return cli_fail("%s: %s", path, err.msg);
  }
  int64_t n_type[GT_TYPE_COUNT] = {0}, params = 0;
  size_t bytes = 0, streamed = 0, mtp = 0;
  for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
    const gguf_tensor_t *t = gguf_tensor(g, i);
    int64_t ne = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) ne *= t->ne[d];
    n_type[t->type]++;
    params += ne;
    bytes += t->nbytes;
    int is_embd = !strcmp(t->name, "token_embd.weight");
    int is_mtp = 0;
    if (!strncmp(t->name, "blk.", 4)) {
      int l = -1;
      sscanf(t->name + 4, "%d", &l);
      is_mtp = l >= hp.n_layer;
    }
    if (is_mtp) mtp += t->nbytes;
    /* decoding streams every weight once, except the embedding gather (unless it is the head) */
    if (!is_mtp && (!is_embd || hp.tied_output)) streamed += t->nbytes;
  }
  printf("file            %s (%.2f MiB, GGUF v%u)\n", path, (double)gguf_file_size(g) / 1048576.0, gguf_version(g));
  printf("architecture    %s\n", hp.arch);
  printf("name            %s\n", hp.name[0] ? hp.name : "-");
  printf("layers          %d", hp.n_layer);
  if (hp.n_gdn_layers) printf(" (%d Gated DeltaNet + %d attention, interval %d)", hp.n_gdn_layers, hp.n_attn_layers, hp.full_attn_interval);
  printf("\nembedding       %d\n", hp.n_embd);
  printf("heads           %d query / %d kv, head_dim %d\n", hp.n_head, hp.n_head_kv, hp.head_dim);
  if (hp.n_gdn_layers)
    printf("gdn             %d key / %d value heads, d_k %d, d_v %d, conv %d\n", hp.gdn_n_k, hp.gdn_n_v, hp.gdn_d_k,
           hp.gdn_d_v, hp.conv_kernel);
  printf("ffn             %d\n", hp.n_ff);
  printf("vocab           %d (%s output head)\n", hp.n_vocab, hp.tied_output ? "tied" : "untied");
  printf("context         %d\n", hp.n_ctx_train);
  printf("rope            NeoX, theta %g, %d of %d dims\n", hp.rope_theta, hp.n_rot, hp.head_dim);
  printf("rms_eps         %g\n", hp.rms_eps);
  printf("mtp layers      %d", hp.n_nextn);
  if (mtp) printf(" (%.2f MiB, the drafter of serve --speculative mtp)", mtp / 1048576.0);
  printf("\nparameters      %lld (%.3f B)\n", (long long)params, params / 1e9);
  printf("tensor bytes    %zu\n", bytes);
  printf("bytes/token     %zu (weights streamed per decoded token)\n", streamed);
  printf("tensor types   ");
  for (int t = 0; t < GT_TYPE_COUNT; t++)
    if (n_type[t]) printf(" %s x%lld", dt_name((gt_type_t)t), (long long)n_type[t]);
  printf("\n");
  tok_t *tok = NULL;
  if (tok_load(g, &tok, &err) == GT_OK) {
    printf("tokenizer       gpt2 BPE, pre %s, %zu tokens, %zu merges, eos %d\n", tok_pre_name(tok), tok_n_vocab(tok),
           tok_n_merges(tok), tok_eos(tok));
    tok_free(tok);
  } else {
    printf("tokenizer       unavailable: %s\n", err.msg);
  }
  gguf_close(g);
  return 0;
}
