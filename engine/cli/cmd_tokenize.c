/* gantry-engine tokenize / detokenize — the model's tokenizer from the command line. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cli/cli.h"
#include "format/tokenizer.h"

/* Opens only the tokenizer of a model file. */
static int open_tok(const char *path, gguf_t **g, tok_t **tok) {
  gt_err_t err = {0};
  if (!path) return cli_fail("--model is required");
  if (gguf_open(path, g, &err)) return cli_fail("%s", err.msg);
  if (tok_load(*g, tok, &err)) {
    gguf_close(*g);
    return cli_fail("%s: tokenizer: %s", path, err.msg);
  }
  return 0;
}

int cmd_tokenize(int argc, char **argv) {
  static const struct option opts[] = {
      {"model", 1, 0, 'm'}, {"text", 1, 0, 't'}, {"special", 0, 0, 's'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
  const char *path = NULL, *text = NULL;
  unsigned flags = 0;
  optind = 1;
  for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
    if (c == 'm') path = optarg;
    else if (c == 't') text = optarg;
    else if (c == 's') flags |= TOK_SPECIAL;
    else if (c == 'h') return puts("usage: gantry-engine tokenize --model M.gguf --text T [--special]"), 0;
    else return 2;
  }
  if (!text) return cli_fail("--text is required"), 2;
  gguf_t *g;
  tok_t *tok;
  if (open_tok(path, &g, &tok)) return 1;
  gt_err_t err = {0};
  int32_t *ids = NULL;
  size_t n = 0;
  int rc = tok_encode(tok, text, strlen(text), flags, &ids, &n, &err);
  if (rc) {
    cli_fail("%s", err.msg);
  } else {
    putchar('[');
    for (size_t i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
    puts("]");
  }
  free(ids);
  tok_free(tok);
  gguf_close(g);
  return rc ? 1 : 0;
}

int cmd_detokenize(int argc, char **argv) {
  static const struct option opts[] = {{"model", 1, 0, 'm'}, {"ids", 1, 0, 'i'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
  const char *path = NULL, *ids_s = NULL;
  optind = 1;
  for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
    if (c == 'm') path = optarg;
    else if (c == 'i') ids_s = optarg;
    else if (c == 'h') return puts("usage: gantry-engine detokenize --model M.gguf --ids 1,2,3"), 0;
    else return 2;
  }
  if (!ids_s) return cli_fail("--ids is required"), 2;
  int32_t *ids = NULL;
  int n = cli_parse_ids(ids_s, &ids);
  if (n < 0) return 2;
  gguf_t *g;
  tok_t *tok;
  if (open_tok(path, &g, &tok)) return free(ids), 1;
  gt_err_t err = {0};
  char *out = NULL;
  size_t len = 0;
  int rc = tok_decode(tok, ids, (size_t)n, 0, &out, &len, &err);
  if (rc) cli_fail("%s", err.msg);
  else fwrite(out, 1, len, stdout), putchar('\n');
  free(out);
  free(ids);
  tok_free(tok);
  gguf_close(g);
  return rc ? 1 : 0;
}
