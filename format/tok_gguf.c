/* format/tok_gguf.c — tok_load: reads tokenizer.ggml.* metadata into a tok_spec_t. */
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "format/tokenizer.h"

/* Optional token id key: -1 when absent; GT_EFORMAT when present but not an integer. */
static int opt_id(const gguf_t *g, const char *key, int32_t *out, gt_err_t *err) {
  int64_t v;
  int rc = gguf_get_int(g, key, &v);
  if (rc == GT_ENOTFOUND) {
    *out = -1;
    return GT_OK;
  }
  if (rc != GT_OK) return gt_err_set(err, GT_EFORMAT, "tokenizer: %s is not an integer", key);
  if (v < 0 || v > INT32_MAX) return gt_err_set(err, GT_EFORMAT, "tokenizer: %s = %lld out of range", key, (long long)v);
  *out = (int32_t)v;
  return GT_OK;
}

static int req_str(const gguf_t *g, const char *key, const char **s, size_t *n, gt_err_t *err) {
  int rc = gguf_get_str(g, key, s, n);
  if (rc == GT_ENOTFOUND) return gt_err_set(err, GT_EFORMAT, "tokenizer: GGUF has no %s", key);
  if (rc != GT_OK) return gt_err_set(err, GT_EFORMAT, "tokenizer: %s is not a string", key);
  return GT_OK;
}

static int str_array(const gguf_t *g, const char *key, int required, uint64_t *n, gt_err_t *err) {
  gguf_vtype_t et;
  int rc = gguf_get_arr(g, key, &et, n);
  if (rc == GT_ENOTFOUND && !required) {
    *n = 0;
    return GT_OK;
  }
  if (rc == GT_ENOTFOUND) return gt_err_set(err, GT_EFORMAT, "tokenizer: GGUF has no %s", key);
  if (rc != GT_OK || et != GGUF_VT_STRING) return gt_err_set(err, GT_EFORMAT, "tokenizer: %s is not a string array", key);
  return GT_OK;
}

int tok_load(const gguf_t *g, tok_t **out, gt_err_t *err) {
  *out = NULL;
  tok_spec_t sp = {0};
  int rc;
  if ((rc = req_str(g, "tokenizer.ggml.model", &sp.model, &sp.model_len, err)) != GT_OK) return rc;
  if (sp.model_len != 4 || memcmp(sp.model, "gpt2", 4) != 0)
    return gt_err_set(err, GT_EUNSUPPORTED,
                      "unsupported tokenizer model tokenizer.ggml.model=\"%.*s\" (only \"gpt2\", byte-level BPE)",
                      (int)(sp.model_len > 64 ? 64 : sp.model_len), sp.model);
  if ((rc = req_str(g, "tokenizer.ggml.pre", &sp.pre, &sp.pre_len, err)) != GT_OK) return rc;

  uint64_t nv, nm;
  if ((rc = str_array(g, "tokenizer.ggml.tokens", 1, &nv, err)) != GT_OK) return rc;
  if ((rc = str_array(g, "tokenizer.ggml.merges", 1, &nm, err)) != GT_OK) return rc;
  if (nv == 0 || nv > INT32_MAX - 1) return gt_err_set(err, GT_EFORMAT, "tokenizer: bad vocab size %llu", (unsigned long long)nv);
  if (nm > INT32_MAX) return gt_err_set(err, GT_EFORMAT, "tokenizer: %llu merges", (unsigned long long)nm);
  sp.n_vocab = (size_t)nv;
  sp.n_merges = (size_t)nm;
  if ((rc = opt_id(g, "tokenizer.ggml.bos_token_id", &sp.bos, err)) ||
      (rc = opt_id(g, "tokenizer.ggml.eos_token_id", &sp.eos, err)) ||
      (rc = opt_id(g, "tokenizer.ggml.eot_token_id", &sp.eot, err)) ||
      (rc = opt_id(g, "tokenizer.ggml.padding_token_id", &sp.pad, err)))
    return rc;

  const char **tokens = malloc(sp.n_vocab * sizeof *tokens);
  size_t *token_lens = malloc(sp.n_vocab * sizeof *token_lens);
  int32_t *types = malloc(sp.n_vocab * sizeof *types);
  const char **merges = malloc((sp.n_merges ? sp.n_merges : 1) * sizeof *merges);
  size_t *merge_lens = malloc((sp.n_merges ? sp.n_merges : 1) * sizeof *merge_lens);
  if (!tokens || !token_lens || !types || !merges || !merge_lens) {
    rc = gt_err_set(err, GT_ENOMEM, "tokenizer: out of memory (%zu tokens)", sp.n_vocab);
    goto done;
  }
  for (size_t i = 0; i < sp.n_vocab; i++) {
    if (gguf_arr_str(g, "tokenizer.ggml.tokens", i, &tokens[i], &token_lens[i]) != GT_OK) {
      rc = gt_err_set(err, GT_EFORMAT, "tokenizer: cannot read tokenizer.ggml.tokens[%zu]", i);
      goto done;
    }
  }
  for (size_t i = 0; i < sp.n_merges; i++) {
    if (gguf_arr_str(g, "tokenizer.ggml.merges", i, &merges[i], &merge_lens[i]) != GT_OK) {
      rc = gt_err_set(err, GT_EFORMAT, "tokenizer: cannot read tokenizer.ggml.merges[%zu]", i);
      goto done;
    }
  }
  gguf_vtype_t et;
  uint64_t nt;
  rc = gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &nt);
  if (rc == GT_ENOTFOUND) {
    for (size_t i = 0; i < sp.n_vocab; i++) types[i] = TOK_TYPE_NORMAL;
  } else if (rc != GT_OK || nt != nv) {
    rc = gt_err_set(err, GT_EFORMAT, "tokenizer: tokenizer.ggml.token_type is not an array of %llu integers",
                    (unsigned long long)nv);
    goto done;
  } else {
    for (size_t i = 0; i < sp.n_vocab; i++) {
      int64_t v;
      if (gguf_arr_int(g, "tokenizer.ggml.token_type", i, &v) != GT_OK || v < 0 || v > 6) {
        rc = gt_err_set(err, GT_EFORMAT, "tokenizer: tokenizer.ggml.token_type[%zu] is not a token type (0..6)", i);
        goto done;
      }
      types[i] = (int32_t)v;
    }
  }
  sp.tokens = tokens;
  sp.token_lens = token_lens;
  sp.types = types;
  sp.merges = merges;
  sp.merge_lens = merge_lens;
  rc = tok_build(&sp, out, err);
done:
  free(tokens);
  free(token_lens);
  free(types);
  free(merges);
  free(merge_lens);
  return rc;
}
