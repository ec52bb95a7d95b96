/* gantry-engine eval — teacher-forced logits of a token sequence, float32 row-major
 * [n_ids, n_vocab], for golden checks. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/cli/cli.h"
#include "engine/models/gen.h"

int cmd_eval(int argc, char **argv) {
  static const struct option opts[] = {{"model", 1, 0, 'm'}, {"ids", 1, 0, 'i'}, {"ids-file", 1, 0, 'f'},
                                       {"logits-out", 1, 0, 'o'}, {"threads", 1, 0, 'j'}, {"device", 1, 0, 'D'}, {"help", 0, 0, 'h'},
                                       CLI_TP_OPTS, {0, 0, 0, 0}};
  const char *model = NULL, *ids_s = NULL, *ids_file = NULL, *out_path = NULL;
  long threads = 0;
  const char *device = "cpu";
  cli_tp_t tp = {.tp = 1};
  optind = 1;
  for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
    int t = cli_tp_opt(c, optarg, &tp);
    if (t < 0) return 2;
    if (t) continue;
    switch (c) {
      case 'm': model = optarg; break;
      case 'i': ids_s = optarg; break;
      case 'f': ids_file = optarg; break;
      case 'o': out_path = optarg; break;
      case 'D': device = optarg; break;
      case 'j': if (cli_int("--threads", optarg, 1, 1024, &threads)) return 2; break;
      case 'h':
        fputs("usage: gantry-engine eval --model M.gguf (--ids 1,2,3 | --ids-file F) --logits-out F.f32 [--device D] "
             "[--threads N]\n" CLI_TP_HELP, stdout);
        return 0;
      default: return 2;
    }
  }
  if (!model || !out_path || !ids_s == !ids_file)
    return cli_fail("need --model, --logits-out and one of --ids / --ids-file"), 2;
  char *file_text = NULL;
  if (ids_file) {
    FILE *f = fopen(ids_file, "rb");
    if (!f) return cli_fail("cannot read %s", ids_file);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    file_text = calloc(1, (size_t)len + 1);
    if (!file_text || fread(file_text, 1, (size_t)len, f) != (size_t)len) {
      fclose(f);
      free(file_text);
      return cli_fail("cannot read %s", ids_file);
    }
    fclose(f);
    ids_s = file_text;
    while (*ids_s == '[' || *ids_s == ' ') ids_s++; /* accept a JSON array too */
    for (char *p = file_text; *p; p++)
      if (*p == ']') *p = ' ';
  }
  int32_t *ids = NULL;
  int n = cli_parse_ids(ids_s, &ids);
  free(file_text);
  if (n <= 0) return n == 0 ? cli_fail("no token ids given") : 1;
  cli_model_t cm;
  if (cli_open_model(model, device, (int)threads, &tp, n < 512 ? n : 512, &cm)) return free(ids), 1;
  int rc = 1;
  gt_err_t err = {0};
  gen_t *gen = NULL;
  size_t V = (size_t)cm.model->hp.n_vocab;
  float *logits = malloc(sizeof(float) * V * (size_t)n);
  for (int i = 0; i < n; i++)
    if (ids[i] >= (int32_t)V) {
      cli_fail("token id %d is outside the vocabulary of %zu", ids[i], V);
      goto out;
    }
  if (!logits) {
    cli_fail("out of memory for %d x %zu logits", n, V);
    goto out;
  }
  if (gen_create(cm.model, n, &gen, &err) || gen_feed(gen, ids, n, 0, logits, NULL, &err)) {
    cli_fail("%s", err.msg);
    goto out;
  }
  FILE *f = fopen(out_path, "wb");
  if (!f || fwrite(logits, sizeof(float), V * (size_t)n, f) != V * (size_t)n || fclose(f)) {
    cli_fail("cannot write %s", out_path);
    goto out;
  }
  fprintf(stderr, "wrote %d x %zu logits to %s\n", n, V, out_path);
  rc = 0;
out:
  gen_free(gen);
  free(logits);
  free(ids);
  cli_close_model(&cm);
  return rc;
}
