/* tools/mkmodel_vocab.c — the tokenizer section of synthetic models (see mkmodel_internal.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "tools/mkmodel_internal.h"
#include "tools/mkmodel_template.h"

enum { TT_NORMAL = 1, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5 };

static const struct {
  const char *text;
  int type;
} k_special[] = {
    {"<|endoftext|>", TT_CONTROL}, {"<|im_start|>", TT_CONTROL},   {"<|im_end|>", TT_CONTROL},
    {"<tool_call>", TT_USER_DEFINED}, {"</tool_call>", TT_USER_DEFINED}, {"<think>", TT_USER_DEFINED},
    {"</think>", TT_USER_DEFINED}, {"<tool_response>", TT_USER_DEFINED},
    {"</tool_response>", TT_USER_DEFINED},
};
#define N_SPECIAL ((int)(sizeof k_special / sizeof k_special[0]))

/* GPT-2 bytes_to_unicode: code point of the i-th byte-level token (printable bytes first). */
static void byte_chars(uint32_t cp[256]) {
  int n = 0, extra = 0;
  int is_printable[256] = {0};
  for (int b = '!'; b <= '~'; b++) is_printable[b] = 1;
  for (int b = 0xA1; b <= 0xAC; b++) is_printable[b] = 1;
  for (int b = 0xAE; b <= 0xFF; b++) is_printable[b] = 1;
  for (int b = 0; b < 256; b++)
    if (is_printable[b]) cp[n++] = (uint32_t)b;
  for (int b = 0; b < 256; b++)
    if (!is_printable[b]) cp[n++] = 256u + (uint32_t)extra++;
}

int mk_emit_tokenizer(gw_t *w, int n_vocab, const char *pre, gt_err_t *err) {
  if (n_vocab < 256 + N_SPECIAL)
    return gt_err_set(err, GT_EINVAL, "vocabulary of %d is smaller than %d", n_vocab, 256 + N_SPECIAL);
  int n_pairs = n_vocab - 256 - N_SPECIAL;
  if (n_pairs > 26 * 26) n_pairs = 26 * 26;
  const int n_fill = n_vocab - 256 - N_SPECIAL - n_pairs;
  const int first_special = n_vocab - N_SPECIAL;
  uint32_t cp[256];
  byte_chars(cp);
  int rc;
#define TRY(x) do { if ((rc = (x))) return rc; } while (0)
  TRY(gw_kv_str(w, "tokenizer.ggml.model", "gpt2", 4, err));
  TRY(gw_kv_str(w, "tokenizer.ggml.pre", pre, strlen(pre), err));
  TRY(gw_kv_arr_str_begin(w, "tokenizer.ggml.tokens", (uint64_t)n_vocab, err));
  char s[32];
  for (int i = 0; i < 256; i++) TRY(gw_kv_arr_str_add(w, s, (size_t)gt_utf8_put(cp[i], s), err));
  for (int i = 0; i < n_pairs; i++) {
    s[0] = (char)('a' + i / 26);
    s[1] = (char)('a' + i % 26);
    TRY(gw_kv_arr_str_add(w, s, 2, err));
  }
  for (int i = 0; i < n_fill; i++) {
    int len = snprintf(s, sizeof s, "[PAD%d]", 256 + n_pairs + i);
    TRY(gw_kv_arr_str_add(w, s, (size_t)len, err));
  }
  for (int i = 0; i < N_SPECIAL; i++) TRY(gw_kv_arr_str_add(w, k_special[i].text, strlen(k_special[i].text), err));
  /* token types (4 bytes per token) */
  int32_t *tt = malloc((size_t)n_vocab * sizeof *tt);
  if (!tt) return gt_err_set(err, GT_ENOMEM, "tokenizer: out of memory");
  for (int i = 0; i < n_vocab; i++) tt[i] = TT_NORMAL;
  for (int i = 0; i < n_fill; i++) tt[256 + n_pairs + i] = TT_UNUSED;
  for (int i = 0; i < N_SPECIAL; i++) tt[first_special + i] = k_special[i].type;
  rc = gw_kv_arr(w, "tokenizer.ggml.token_type", GGUF_VT_INT32, tt, (uint64_t)n_vocab, err);
  free(tt);
  if (rc) return rc;
  TRY(gw_kv_arr_str_begin(w, "tokenizer.ggml.merges", (uint64_t)n_pairs, err));
  for (int i = 0; i < n_pairs; i++) {
    s[0] = (char)('a' + i / 26);
    s[1] = ' ';
    s[2] = (char)('a' + i % 26);
    TRY(gw_kv_arr_str_add(w, s, 3, err));
  }
  TRY(gw_kv_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)(first_special + 2), err));
  TRY(gw_kv_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)first_special, err));
  TRY(gw_kv_bool(w, "tokenizer.ggml.add_bos_token", 0, err));
  TRY(gw_kv_str(w, "tokenizer.chat_template", k_mk_qwen3_chat_template,
                sizeof k_mk_qwen3_chat_template - 1, err));
#undef TRY
  return GT_OK;
}
