/* engine/grammar/gr_vocab.c — the vocabulary as a byte trie in preorder, for mask walks that
 * skip whole subtrees once a prefix is dead. */
#define _GNU_SOURCE /* qsort_r */
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/gr_vocab.h"

/* pieces in byte order, shorter first, then by id */
static int cmp_tok(const void *a, const void *b, void *ctx) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  const gr_vocab_t *v = ctx;
  uint32_t lx = v->piece_len[x], ly = v->piece_len[y];
  int c = memcmp(v->blob + v->piece_off[x], v->blob + v->piece_off[y], lx < ly ? lx : ly);
  if (c) return c;
  if (lx != ly) return lx < ly ? -1 : 1;
  return x < y ? -1 : x > y;
}

static int eligible(const tok_t *tok, int32_t id) {
  tok_type_t t = tok_type(tok, id);
  return t == TOK_TYPE_NORMAL || t == TOK_TYPE_BYTE;
}

int gr_vocab_new(const tok_t *tok, gr_vocab_t **out, gt_err_t *err) {
  int32_t ends[2];
  size_t n = 0;
  if (tok_eos(tok) >= 0) ends[n++] = tok_eos(tok);
  if (tok_eot(tok) >= 0 && tok_eot(tok) != tok_eos(tok)) ends[n++] = tok_eot(tok);
  return gr_vocab_new_with_ends(tok, ends, n, out, err);
}

int gr_vocab_new_with_ends(const tok_t *tok, const int32_t *ends, size_t n_ends, gr_vocab_t **out, gt_err_t *err) {
  *out = NULL;
  size_t n = tok_n_vocab(tok);
  if (n == 0 || n > INT32_MAX / 2) return gt_err_set(err, GT_EINVAL, "grammar vocab: %zu tokens", n);
  if (n_ends > GR_MAX_END_TOKENS)
    return gt_err_set(err, GT_EINVAL, "grammar vocab: %zu end tokens (at most %d)", n_ends, GR_MAX_END_TOKENS);
  for (size_t i = 0; i < n_ends; i++)
    if (ends[i] < 0 || (size_t)ends[i] >= n)
      return gt_err_set(err, GT_EINVAL, "grammar vocab: end token %d out of range", (int)ends[i]);
  gr_vocab_t *v = calloc(1, sizeof *v);
  if (!v) return gt_err_set(err, GT_ENOMEM, "grammar vocab: out of memory");
  v->n_vocab = n;
  v->n_words = (n + 31) / 32;
  for (size_t i = 0; i < n_ends; i++) v->ends[i] = ends[i];
  v->n_ends = n_ends;
  size_t bytes = 0;
  for (size_t i = 0; i < n; i++) {
    size_t len = 0;
    tok_piece(tok, (int32_t)i, &len);
    bytes += len;
  }
  v->blob = malloc(bytes ? bytes : 1);
  v->piece_off = malloc(n * sizeof *v->piece_off);
  v->piece_len = calloc(n, sizeof *v->piece_len);
  v->in_trie = calloc(n, 1);
  int32_t *order = malloc(n * sizeof *order);
  /* nodes <= total bytes of eligible tokens */
  v->byte = malloc(bytes ? bytes : 1);
  v->depth = malloc((bytes ? bytes : 1) * sizeof *v->depth);
  v->skip = malloc((bytes ? bytes : 1) * sizeof *v->skip);
  v->tok_first = malloc((bytes + 1) * sizeof *v->tok_first);
  v->text_sub = malloc(bytes ? bytes : 1);
  v->tok_count = malloc((bytes ? bytes : 1) * sizeof *v->tok_count);
  v->toks = malloc(n * sizeof *v->toks);
  int32_t *path = NULL;
  uint32_t *dec = NULL; /* dec[d]: text decoder state after the first d bytes of the path */
  if (!v->blob || !v->piece_off || !v->piece_len || !v->in_trie || !order || !v->byte || !v->depth || !v->skip ||
      !v->tok_first || !v->tok_count || !v->toks || !v->text_sub)
    goto oom;
  size_t off = 0, n_el = 0, max_len = 0;
  for (size_t i = 0; i < n; i++) {
    size_t len = 0;
    const char *p = tok_piece(tok, (int32_t)i, &len);
    if (len > 0xFFFF) len = 0; /* absurd pieces never match */
    memcpy(v->blob + off, p, len);
    v->piece_off[i] = (uint32_t)off;
    v->piece_len[i] = (uint32_t)len;
    off += len;
    if (len > 0 && eligible(tok, (int32_t)i) && !gr_vocab_is_end(v, (int32_t)i)) {
      order[n_el++] = (int32_t)i;
      v->in_trie[i] = 1;
      if (len > max_len) max_len = len;
    }
  }
  v->max_depth = max_len;
  path = malloc((max_len + 1) * sizeof *path);
  dec = malloc((max_len + 1) * sizeof *dec);
  if (!path || !dec) goto oom;
  qsort_r(order, n_el, sizeof *order, cmp_tok, v);

  /* Preorder: token k's new nodes are its bytes past the common prefix with token k-1. */
  size_t depth = 0, nn = 0, nt = 0;
  dec[0] = GR_TEXT_START;
  const unsigned char *prev = NULL;
  size_t prev_len = 0;
  for (size_t k = 0; k < n_el; k++) {
    int32_t id = order[k];
    const unsigned char *s = (const unsigned char *)v->blob + v->piece_off[id];
    size_t len = v->piece_len[id], lcp = 0;
    while (prev && lcp < len && lcp < prev_len && s[lcp] == prev[lcp]) lcp++;
    while (depth > lcp) v->skip[path[--depth]] = (int32_t)nn; /* close subtrees */
    while (depth < len) {
      v->byte[nn] = s[depth];
      v->depth[nn] = (uint16_t)(depth + 1);
      v->tok_first[nn] = (int32_t)nt; /* this node's own tokens, if any, come next */
      v->tok_count[nn] = 0;
      dec[depth + 1] = gr_text_next(dec[depth], s[depth]);
      v->text_sub[nn] = dec[depth] == GR_TEXT_START; /* the subtree condition is added below */
      path[depth++] = (int32_t)nn++;
    }
    int32_t node = path[len - 1];
    v->tok_count[node]++;
    v->toks[nt++] = id;
    prev = s;
    prev_len = len;
  }
  while (depth > 0) v->skip[path[--depth]] = (int32_t)nn;
  v->n_nodes = nn;
  v->n_trie_tokens = nt;
  v->tok_first[nn] = (int32_t)nt;
  /* text_sub[i] also needs no GR_TEXT_BAD node in [i, skip[i]): prefix sums of bad nodes */
  int32_t *nbad = malloc((nn + 1) * sizeof *nbad);
  if (!nbad) goto oom;
  nbad[0] = 0;
  for (size_t i = 0; i < nn; i++) { /* recompute each node's state along the preorder */
    dec[v->depth[i]] = gr_text_next(dec[v->depth[i] - 1], v->byte[i]);
    nbad[i + 1] = nbad[i] + (dec[v->depth[i]] == GR_TEXT_BAD);
  }
  for (size_t i = 0; i < nn; i++) v->text_sub[i] = v->text_sub[i] && nbad[v->skip[i]] == nbad[i];
  free(nbad);
  free(path);
  free(dec);
  free(order);
  *out = v;
  return GT_OK;
oom:
  free(path);
  free(dec);
  free(order);
  gr_vocab_free(v);
  return gt_err_set(err, GT_ENOMEM, "grammar vocab: out of memory");
}

void gr_vocab_free(gr_vocab_t *v) {
  if (!v) return;
  free(v->blob);
  free(v->piece_off);
  free(v->piece_len);
  free(v->in_trie);
  free(v->byte);
  free(v->depth);
  free(v->skip);
  free(v->tok_first);
  free(v->text_sub);
  free(v->tok_count);
  free(v->toks);
  free(v);
}

size_t gr_mask_words(const gr_vocab_t *v) { return v->n_words; }

int gr_vocab_is_end(const gr_vocab_t *v, int32_t id) {
  for (size_t i = 0; i < v->n_ends; i++)
    if (v->ends[i] == id) return 1;
  return 0;
}
size_t gr_vocab_size(const gr_vocab_t *v) { return v->n_vocab; }
