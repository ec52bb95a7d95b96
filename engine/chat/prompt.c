/* engine/chat/prompt.c — see prompt.h. */
#include "engine/chat/prompt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int prompt_chat_family(const gguf_t *g, chat_family_t *out, gt_err_t *err) {
  const char *src = NULL;
  size_t len = 0;
  if (gguf_get_str(g, "tokenizer.chat_template", &src, &len) || !src || !len)
    return gt_err_set(err, GT_ENOTFOUND, "the model has no tokenizer.chat_template: chat input is not available");
  char *z = malloc(len + 1);
  if (!z) return gt_err_set(err, GT_ENOMEM, "out of memory");
  memcpy(z, src, len);
  z[len] = 0;
  int rc = chat_template_detect(z, out, err);
  free(z);
  return rc;
}

int prompt_encode_text(const tok_t *tok, const char *text, size_t len, int parse_special, int32_t **ids,
                       size_t *n, gt_err_t *err) {
  return tok_encode(tok, text, len, parse_special ? TOK_SPECIAL : 0, ids, n, err);
}

int prompt_has_special(const tok_t *tok, const char *text, size_t len) {
  if (!text || !len || !memchr(text, '<', len)) return 0; /* every Qwen special token starts with '<' */
  int32_t *ids = NULL;
  size_t n = 0;
  if (tok_encode(tok, text, len, TOK_SPECIAL, &ids, &n, NULL)) return 0; /* invalid text: the later encode reports it */
  int found = 0;
  for (size_t i = 0; i < n && !found; i++) {
    tok_type_t t = tok_type(tok, ids[i]);
    found = t == TOK_TYPE_CONTROL || t == TOK_TYPE_USER_DEFINED;
  }
  free(ids);
  return found;
}

/* ---- growing id array ---- */
typedef struct {
  int32_t *v;
  size_t n, cap;
} idvec_t;

static int idvec_append(idvec_t *a, const int32_t *ids, size_t n) {
  if (a->n + n > a->cap) {
    size_t cap = a->cap ? a->cap : 256;
    while (cap < a->n + n) cap *= 2;
    int32_t *v = realloc(a->v, cap * sizeof *v);
    if (!v) return GT_ENOMEM;
    a->v = v;
    a->cap = cap;
  }
  if (n) memcpy(a->v + a->n, ids, n * sizeof *ids);
  a->n += n;
  return GT_OK;
}

static int encode_append(const tok_t *tok, idvec_t *a, const char *s, size_t len, unsigned flags, gt_err_t *err) {
  if (!len) return GT_OK;
  int32_t *ids = NULL;
  size_t n = 0;
  int rc = tok_encode(tok, s, len, flags, &ids, &n, err);
  if (!rc && idvec_append(a, ids, n)) rc = gt_err_set(err, GT_ENOMEM, "out of memory");
  free(ids);
  return rc;
}

/* Python's str.strip() of the ASCII / C0 whitespace the Qwen3.5 template trims (|trim). */
static int is_py_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }

static int is_wrapped_tool_response(const char *c, size_t n) {
  static const char open[] = "<tool_response>", close[] = "</tool_response>";
  return n >= sizeof open - 1 + sizeof close - 1 && !memcmp(c, open, sizeof open - 1) &&
         !memcmp(c + n - (sizeof close - 1), close, sizeof close - 1);
}

#define MAX_SENT 64

int prompt_encode_chat(const tok_t *tok, const chat_family_t *fam, const chat_msg_t *msgs, size_t n_msgs,
                       const chat_render_opts_t *opts, int parse_special, int32_t **ids, size_t *n,
                       gt_err_t *err) {
  *ids = NULL;
  *n = 0;
  /* Which contents need the plain-text treatment. */
  size_t *which = NULL, n_which = 0;
  if (!parse_special) {
    which = malloc(sizeof *which * (n_msgs ? n_msgs : 1));
    if (!which) return gt_err_set(err, GT_ENOMEM, "out of memory");
    for (size_t i = 0; i < n_msgs; i++) {
      const chat_msg_t *m = &msgs[i];
      if (m->role == CHAT_ROLE_ASSISTANT || !m->content) continue;
      size_t len = strlen(m->content);
      const char *c = m->content;
      size_t cl = len;
      if (fam->id == CHAT_FAMILY_QWEN35) {
        while (cl && is_py_space((unsigned char)*c)) c++, cl--;
        while (cl && is_py_space((unsigned char)c[cl - 1])) cl--;
      }
      if (m->role == CHAT_ROLE_USER && is_wrapped_tool_response(c, cl)) continue;
      if (prompt_has_special(tok, m->content, len)) which[n_which++] = i;
    }
  }
  char *text = NULL;
  size_t text_len = 0;
  int rc;
  if (n_which == 0) { /* the normal case: one TOK_SPECIAL pass over the whole rendering */
    free(which);
    rc = chat_render(fam, msgs, n_msgs, opts, &text, &text_len, err);
    if (!rc) rc = tok_encode(tok, text, text_len, TOK_SPECIAL, ids, n, err);
    free(text);
    return rc;
  }
  /* Sentinels: "\x01gantry:<nonce>:<i>\x01", with a nonce that occurs in no content. */
  chat_msg_t *copy = malloc(sizeof *copy * n_msgs);
  char (*sent)[MAX_SENT] = malloc(sizeof *sent * n_which);
  idvec_t out = {0};
  if (!copy || !sent) {
    rc = gt_err_set(err, GT_ENOMEM, "out of memory");
    goto done;
  }
  memcpy(copy, msgs, sizeof *copy * n_msgs);
  unsigned nonce = 0;
  for (int clash = 1; clash; nonce++) {
    char probe[32];
    snprintf(probe, sizeof probe, "\x01gantry:%u:", nonce);
    clash = 0;
    for (size_t i = 0; i < n_msgs && !clash; i++)
      clash = (msgs[i].content && strstr(msgs[i].content, probe)) ||
              (msgs[i].reasoning_content && strstr(msgs[i].reasoning_content, probe));
    if (!clash && opts && opts->tools_json) clash = strstr(opts->tools_json, probe) != NULL;
    if (!clash) break;
  }
  for (size_t k = 0; k < n_which; k++) {
    snprintf(sent[k], MAX_SENT, "\x01gantry:%u:%zu\x01", nonce, k);
    copy[which[k]].content = sent[k];
  }
  rc = chat_render(fam, copy, n_msgs, opts, &text, &text_len, err);
  if (rc) goto done;
  char head[32];
  int head_len = snprintf(head, sizeof head, "\x01gantry:%u:", nonce);
  const char *p = text, *end = text + text_len;
  while (!rc && p < end) {
    const char *s = strstr(p, head);
    if (!s) {
      rc = encode_append(tok, &out, p, (size_t)(end - p), TOK_SPECIAL, err);
      break;
    }
    char *num_end;
    unsigned long k = strtoul(s + head_len, &num_end, 10);
    if (k >= n_which || *num_end != '\x01') {
      rc = gt_err_set(err, GT_EINTERNAL, "chat prompt: malformed sentinel in the rendering");
      break;
    }
    rc = encode_append(tok, &out, p, (size_t)(s - p), TOK_SPECIAL, err);
    if (rc) break;
    const chat_msg_t *m = &msgs[which[k]];
    const char *c = m->content;
    size_t cl = strlen(c);
    if (fam->id == CHAT_FAMILY_QWEN35) { /* the template trims content */
      while (cl && is_py_space((unsigned char)*c)) c++, cl--;
      while (cl && is_py_space((unsigned char)c[cl - 1])) cl--;
    }
    rc = encode_append(tok, &out, c, cl, 0, err);
    p = num_end + 1;
  }
done:
  free(text);
  free(copy);
  free(sent);
  free(which);
  if (rc) {
    free(out.v);
    return rc;
  }
  *ids = out.v;
  *n = out.n;
  return GT_OK;
}

int prompt_build(const gguf_t *g, const tok_t *tok, const prompt_spec_t *ps, int32_t **ids, size_t *n,
                 gt_err_t *err) {
  if (ps->prompt) return prompt_encode_text(tok, ps->prompt, strlen(ps->prompt), ps->special, ids, n, err);
  if (!ps->chat) return gt_err_set(err, GT_EINVAL, "no prompt given");
  chat_family_t fam;
  int rc = prompt_chat_family(g, &fam, err);
  if (rc) return rc;
  chat_msg_t msgs[2];
  size_t nm = 0;
  if (ps->system) msgs[nm++] = (chat_msg_t){.role = CHAT_ROLE_SYSTEM, .content = ps->system};
  msgs[nm++] = (chat_msg_t){.role = CHAT_ROLE_USER, .content = ps->chat};
  chat_render_opts_t o = {.add_generation_prompt = true, .enable_thinking = !ps->no_think};
  return prompt_encode_chat(tok, &fam, msgs, nm, &o, ps->special, ids, n, err);
}
