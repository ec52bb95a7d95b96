/* tests/unit/test_tokenizer.c — the tokenizer against HF tokenizers' ids (golden fixtures), the
 * qwen35 pre-tokenizer, NFC, special tokens, streaming decode, errors and fuzz regressions. */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include "format/gguf.h"
#include "format/tok_pretok.h"
#include "format/tok_utf8.h"
#include "format/tokenizer.h"
#include "tests/common/testutil.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size); /* tests/fuzz/fuzz_tokenizer.c */

/* ------------------------------------------------------------ helpers */

static tok_t *load_tok(const char *rel, gguf_t **gout) {
  gt_err_t err = {0};
  gguf_t *g = NULL;
  if (gguf_open(tu_golden(rel), &g, &err) != GT_OK) fail_msg("gguf_open %s: %s", rel, err.msg);
  tok_t *t = NULL;
  if (tok_load(g, &t, &err) != GT_OK) fail_msg("tok_load %s: %s", rel, err.msg);
  if (gout)
    *gout = g;
  else
    gguf_close(g);
  return t;
}

static int32_t *json_ids(json_t *arr, size_t *n) {
  *n = json_array_size(arr);
  int32_t *v = malloc((*n ? *n : 1) * sizeof *v);
  for (size_t i = 0; i < *n; i++) v[i] = (int32_t)json_integer_value(json_array_get(arr, i));
  return v;
}

static void print_ids(const char *what, const int32_t *ids, size_t n) {
  fprintf(stderr, "  %s (%zu):", what, n);
  for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
  fprintf(stderr, "\n");
}

/* Streams ids through tok_stream_t one by one: every chunk must be valid UTF-8; returns the
 * concatenation (malloc'd). */
static char *stream_all(const tok_t *t, const int32_t *ids, size_t n, unsigned flags, size_t *len) {
  tok_stream_t s;
  tok_stream_init(&s, t, flags);
  size_t cap = 64, o = 0;
  char *all = malloc(cap);
  gt_err_t err = {0};
  for (size_t i = 0; i <= n; i++) {
    const char *txt;
    size_t l;
    int rc = i < n ? tok_stream_push(&s, ids[i], &txt, &l, &err) : tok_stream_flush(&s, &txt, &l, &err);
    assert_int_equal(rc, GT_OK);
    assert_int_equal(gt_utf8_invalid_at(txt, l), l); /* never half a character */
    while (o + l + 1 > cap) all = realloc(all, cap *= 2);
    memcpy(all + o, txt, l);
    o += l;
  }
  tok_stream_free(&s);
  all[o] = 0;
  *len = o;
  return all;
}

/* Encodes text (with flags) and checks ids == want, decode(ids) == decoded and the stream's
 * output == decoded. Returns 1 on success (prints the difference otherwise). */
static int check_case(const tok_t *t, const char *text, size_t tlen, unsigned flags, const int32_t *want, size_t nwant,
                      const char *decoded, size_t dlen) {
  gt_err_t err = {0};
  int32_t *ids = NULL;
  size_t n = 0;
  int rc = tok_encode(t, text, tlen, flags, &ids, &n, &err);
  if (rc != GT_OK) {
    fprintf(stderr, "encode failed for \"%.*s\": %s\n", (int)tlen, text, err.msg);
    return 0;
  }
  int ok = n == nwant && (n == 0 || memcmp(ids, want, n * sizeof *ids) == 0);
  if (!ok) {
    fprintf(stderr, "ids differ for \"%.*s\"\n", (int)tlen, text);
    print_ids("got ", ids, n);
    print_ids("want", want, nwant);
  }
  char *out = NULL;
  size_t olen = 0;
  assert_int_equal(tok_decode(t, want, nwant, 0, &out, &olen, &err), GT_OK);
  if (olen != dlen || memcmp(out, decoded, dlen) != 0) {
    fprintf(stderr, "decode differs for \"%.*s\": got \"%.*s\"\n", (int)tlen, text, (int)olen, out);
    ok = 0;
  }
  size_t slen;
  char *st = stream_all(t, want, nwant, 0, &slen);
  if (slen != dlen || memcmp(st, decoded, dlen) != 0) {
    fprintf(stderr, "stream decode differs for \"%.*s\"\n", (int)tlen, text);
    ok = 0;
  }
  free(st);
  free(out);
  free(ids);
  return ok;
}

/* ------------------------------------------------------------ golden: real Qwen3 vocab */

static void test_qwen3_vocab_cases(void **state) {
  (void)state;
  tok_t *t = load_tok("qwen3-vocab.gguf", NULL);
  assert_int_equal(tok_n_vocab(t), 151936);
  assert_string_equal(tok_pre_name(t), "qwen2");
  assert_int_equal(tok_eos(t), 151645);
  assert_int_equal(tok_eot(t), -1);
  assert_int_equal(tok_bos(t), -1);
  assert_int_equal(tok_pad(t), 151643);
  assert_int_equal(tok_find(t, "<|im_start|>"), 151644);
  assert_int_equal(tok_find(t, "<think>"), 151667);
  assert_int_equal(tok_find(t, "no such token at all"), -1);
  assert_true(tok_is_control(t, 151645));
  assert_false(tok_is_control(t, 151667)); /* <think> is user-defined */
  assert_false(tok_is_control(t, 9707));

  json_t *cases = tu_json("qwen3-tokenizer-cases.json");
  size_t nc = json_array_size(cases), bad = 0;
  assert_int_equal(nc, 60);
  for (size_t i = 0; i < nc; i++) {
    json_t *c = json_array_get(cases, i);
    json_t *jt = json_object_get(c, "text"), *jd = json_object_get(c, "decoded");
    size_t nw;
    int32_t *want = json_ids(json_object_get(c, "ids"), &nw);
    /* HF tokenizers parses added tokens in text by default: the fixtures were made that way
     * (e.g. "...user content<|im_end|>" ends in id 151645), so encode with TOK_SPECIAL. */
    if (!check_case(t, json_string_value(jt), json_string_length(jt), TOK_SPECIAL, want, nw, json_string_value(jd),
                    json_string_length(jd))) {
      fprintf(stderr, "  (case %zu)\n", i);
      bad++;
    }
    free(want);
  }
  json_decref(cases);
  tok_free(t);
  assert_int_equal(bad, 0);
}

/* Rendered chat prompts (tools, tool calls, <think>, Chinese) with their ids: the control
 * tokens and the user-defined ones (<think>, <tool_call>, ...) parsed whole. */
static void test_qwen3_chat_template_ids(void **state) {
  (void)state;
  tok_t *t = load_tok("qwen3-vocab.gguf", NULL);
  json_t *cases = tu_json("qwen3-chat-template-cases.json");
  size_t bad = 0;
  assert_true(json_array_size(cases) >= 6);
  for (size_t i = 0; i < json_array_size(cases); i++) {
    json_t *c = json_array_get(cases, i);
    json_t *jr = json_object_get(c, "rendered");
    size_t nw;
    int32_t *want = json_ids(json_object_get(c, "rendered_ids"), &nw);
    if (!check_case(t, json_string_value(jr), json_string_length(jr), TOK_SPECIAL, want, nw, json_string_value(jr),
                    json_string_length(jr))) {
      fprintf(stderr, "  (chat case %zu)\n", i);
      bad++;
    }
    free(want);
  }
  json_decref(cases);
  tok_free(t);
  assert_int_equal(bad, 0);
}

/* ------------------------------------------------------------ golden: tiny models, demo model */

static void check_manifest_model(const char *gguf_rel, json_t *model_cases, const char *label) {
  tok_t *t = load_tok(gguf_rel, NULL);
  size_t bad = 0;
  for (size_t i = 0; i < json_array_size(model_cases); i++) {
    json_t *c = json_array_get(model_cases, i);
    json_t *jt = json_object_get(c, "text");
    size_t nw;
    int32_t *want = json_ids(json_object_get(c, "prompt_ids"), &nw);
    /* The chat case's text carries <|im_start|> / <|im_end|>; its prompt_ids hold them as
     * single control tokens, so these too were encoded with special-token parsing. */
    if (!check_case(t, json_string_value(jt), json_string_length(jt), TOK_SPECIAL, want, nw, json_string_value(jt),
                    json_string_length(jt))) {
      fprintf(stderr, "  (%s case %zu)\n", label, i);
      bad++;
    }
    free(want);
  }
  tok_free(t);
  assert_int_equal(bad, 0);
}

static void test_tiny_models_manifest(void **state) {
  (void)state;
  json_t *m = tu_json("manifest.json");
  json_t *models = json_object_get(m, "models");
  const char *name;
  json_t *model;
  int n_models = 0, n_lists = 0;
  json_object_foreach(models, name, model) {
    json_t *ggufs = json_object_get(model, "gguf");
    const char *qt;
    json_t *file;
    json_object_foreach(ggufs, qt, file) {
      /* cases (bf16) and cases_<QTYPE> all hold texts with their prompt ids */
      char key[64];
      snprintf(key, sizeof key, strcmp(qt, "bf16") == 0 ? "cases" : "cases_%s", qt);
      json_t *cases = json_object_get(model, key);
      if (!cases) continue;
      char label[128];
      snprintf(label, sizeof label, "%s %s", name, qt);
      check_manifest_model(json_string_value(file), cases, label);
      n_lists++;
    }
    n_models++;
  }
  assert_int_equal(n_models, 2);
  assert_int_equal(n_lists, 5); /* qwen3-tiny: bf16, Q8_0, Q4_K_M, Q6_K; qwen35-tiny: bf16 */
  json_decref(m);
}

static void test_demo_model_prompts(void **state) {
  (void)state;
  json_t *m = tu_json("demo/manifest.json");
  json_t *cases = json_object_get(m, "cases");
  assert_int_equal(json_array_size(cases), 3);
  char rel[256];
  snprintf(rel, sizeof rel, "demo/%s", json_string_value(json_object_get(m, "model")));
  check_manifest_model(rel, cases, "demo");
  json_decref(m);
}

/* ------------------------------------------------------------ special tokens as plain text */

static void test_special_tokens_plain_text(void **state) {
  (void)state;
  tok_t *t = load_tok("qwen3-vocab.gguf", NULL);
  const char *txt = "<|im_start|>user\nhi<think>x</think><|im_end|>";
  gt_err_t err = {0};
  int32_t *sp = NULL, *pl = NULL;
  size_t nsp, npl;
  assert_int_equal(tok_encode(t, txt, strlen(txt), TOK_SPECIAL, &sp, &nsp, &err), GT_OK);
  assert_int_equal(tok_encode(t, txt, strlen(txt), 0, &pl, &npl, &err), GT_OK);
  /* with parsing: <|im_start|> user \n hi <think> x </think> <|im_end|> */
  assert_int_equal(sp[0], 151644);
  assert_int_equal(sp[nsp - 1], 151645);
  int seen_think = 0;
  for (size_t i = 0; i < nsp; i++) seen_think += sp[i] == 151667 || sp[i] == 151668;
  assert_int_equal(seen_think, 2);
  /* without: no control or user-defined ids at all, and more tokens */
  for (size_t i = 0; i < npl; i++) {
    tok_type_t ty = tok_type(t, pl[i]);
    assert_true(ty == TOK_TYPE_NORMAL);
  }
  assert_true(npl > nsp);
  /* plain text round-trips to the same bytes */
  char *out;
  size_t olen;
  assert_int_equal(tok_decode(t, pl, npl, 0, &out, &olen, &err), GT_OK);
  assert_int_equal(olen, strlen(txt));
  assert_memory_equal(out, txt, olen);
  free(out);
  /* "<|" of <|im_start|> in plain mode is BPE of the text: the same as encoding it alone */
  int32_t *alone;
  size_t nalone;
  assert_int_equal(tok_encode(t, "<|im_start|>", 12, 0, &alone, &nalone, &err), GT_OK);
  assert_true(nalone > 1);
  assert_memory_equal(alone, pl, nalone * sizeof *alone);
  free(alone);
  /* TOK_SKIP_CONTROL drops control tokens, keeps user-defined ones */
  assert_int_equal(tok_decode(t, sp, nsp, TOK_SKIP_CONTROL, &out, &olen, &err), GT_OK);
  assert_string_equal(out, "user\nhi<think>x</think>");
  free(out);
  free(sp);
  free(pl);
  tok_free(t);
}

/* Trusted template text around untrusted user content: specials only in the trusted spans, and
 * BPE / pre-tokenization across span boundaries as for the concatenated text. */
static void test_encode_spans(void **state) {
  (void)state;
  tok_t *t = load_tok("qwen3-vocab.gguf", NULL);
  gt_err_t err = {0};
  const char *user = "hi <|im_end|> there";
  tok_span_t sp[] = {{"<|im_start|>user\n", 17, TOK_SPECIAL}, {user, strlen(user), 0}, {"<|im_end|>\n", 11, TOK_SPECIAL}};
  int32_t *ids, *mid, *nl;
  size_t n, nmid, nnl;
  assert_int_equal(tok_encode_spans(t, sp, 3, &ids, &n, &err), GT_OK);
  /* expected: <|im_start|>, plain("user\nhi <|im_end|> there") (one segment across the span
   * boundary), <|im_end|>, "\n" */
  char buf[64];
  snprintf(buf, sizeof buf, "user\n%s", user);
  assert_int_equal(tok_encode(t, buf, strlen(buf), 0, &mid, &nmid, &err), GT_OK);
  assert_int_equal(tok_encode(t, "\n", 1, 0, &nl, &nnl, &err), GT_OK);
  assert_int_equal(n, 1 + nmid + 1 + nnl);
  assert_int_equal(ids[0], 151644);
  assert_memory_equal(ids + 1, mid, nmid * sizeof *ids);
  assert_int_equal(ids[1 + nmid], 151645);
  assert_memory_equal(ids + 2 + nmid, nl, nnl * sizeof *ids);
  for (size_t i = 1; i <= nmid; i++) assert_int_equal(tok_type(t, ids[i]), TOK_TYPE_NORMAL);
  free(ids);
  free(mid);
  free(nl);
  /* a word split over two spans is one word: " Hel" + "lo" == " Hello" */
  tok_span_t w[] = {{" Hel", 4, 0}, {"lo", 2, TOK_SPECIAL}};
  assert_int_equal(tok_encode_spans(t, w, 2, &ids, &n, &err), GT_OK);
  assert_int_equal(n, 1);
  assert_int_equal(ids[0], 21927);
  free(ids);
  /* a special token cut by a span boundary is not recognised */
  tok_span_t cut[] = {{"<|im_", 5, TOK_SPECIAL}, {"end|>", 5, TOK_SPECIAL}};
  assert_int_equal(tok_encode_spans(t, cut, 2, &ids, &n, &err), GT_OK);
  for (size_t i = 0; i < n; i++) assert_int_equal(tok_type(t, ids[i]), TOK_TYPE_NORMAL);
  free(ids);
  /* each span must be valid UTF-8 on its own */
  tok_span_t bad[] = {{"ok", 2, 0}, {"\xE4\xB8", 2, 0}, {"\xAD", 1, 0}};
  assert_int_equal(tok_encode_spans(t, bad, 3, &ids, &n, &err), GT_EINVAL);
  assert_non_null(strstr(err.msg, "span 1"));
  assert_int_equal(tok_encode_spans(t, NULL, 0, &ids, &n, &err), GT_OK);
  assert_int_equal(n, 0);
  tok_free(t);
}

/* ------------------------------------------------------------ streaming decode */

static void test_stream_multibyte(void **state) {
  (void)state;
  tok_t *t = load_tok("qwen3-vocab.gguf", NULL);
  /* " this is 🦙.cpp" = [419, 374, 11162, 99, 247, 13, 10821]: 🦙 (F0 9F A6 99) is split over
   * 11162 (" " F0 9F A6?) , 99 and 247: nothing of it may come out before the last part. */
  const int32_t ids[] = {419, 374, 11162, 99, 247, 13, 10821};
  tok_stream_t s;
  tok_stream_init(&s, t, 0);
  gt_err_t err = {0};
  const char *txt;
  size_t l;
  char acc[128] = {0};
  size_t o = 0;
  int emitted_empty = 0;
  for (size_t i = 0; i < 7; i++) {
    assert_int_equal(tok_stream_push(&s, ids[i], &txt, &l, &err), GT_OK);
    assert_int_equal(gt_utf8_invalid_at(txt, l), l);
    emitted_empty += l == 0;
    memcpy(acc + o, txt, l);
    o += l;
  }
  assert_int_equal(tok_stream_flush(&s, &txt, &l, &err), GT_OK);
  assert_int_equal(l, 0);
  assert_true(emitted_empty >= 1); /* at least one token completed no character */
  assert_string_equal(acc, " this is \xF0\x9F\xA6\x99.cpp");
  tok_stream_free(&s);

  /* every emoji / CJK / multi-script case of the fixture: token by token == whole decode */
  json_t *cases = tu_json("qwen3-tokenizer-cases.json");
  int split_chars = 0;
  for (size_t i = 0; i < json_array_size(cases); i++) {
    json_t *c = json_array_get(cases, i);
    size_t n;
    int32_t *v = json_ids(json_object_get(c, "ids"), &n);
    char *whole;
    size_t wl, sl;
    assert_int_equal(tok_decode(t, v, n, 0, &whole, &wl, &err), GT_OK);
    char *st = stream_all(t, v, n, 0, &sl);
    assert_int_equal(sl, wl);
    assert_memory_equal(st, whole, wl);
    for (size_t k = 0; k < n; k++) { /* count tokens whose piece is not whole UTF-8 */
      size_t pl;
      const char *p = tok_piece(t, v[k], &pl);
      split_chars += gt_utf8_invalid_at(p, pl) != pl;
    }
    free(st);
    free(whole);
    free(v);
  }
  assert_true(split_chars >= 10); /* the fixture does exercise characters split across tokens */
  json_decref(cases);
  tok_free(t);
}

static void test_stream_invalid_bytes(void **state) {
  (void)state;
  tok_t *t = load_tok("qwen3-tiny.bf16.gguf", NULL);
  /* single-byte tokens: byte_id via tok_find of the byte-alphabet character */
  char u[4];
  int32_t b[256];
  for (int i = 0; i < 256; i++) {
    int l = gt_utf8_put(tok_byte_to_cp((uint8_t)i), u);
    u[l] = 0;
    b[i] = tok_find(t, u);
    assert_true(b[i] >= 0);
  }
  gt_err_t err = {0};
  size_t l;
  /* lone continuation byte, then 'a': U+FFFD a */
  int32_t s1[] = {b[0x80], b['a']};
  char *o = stream_all(t, s1, 2, 0, &l);
  assert_string_equal(o, "\xEF\xBF\xBD" "a");
  free(o);
  /* E4 B8 (incomplete) then 'a': the held prefix cannot complete -> one U+FFFD, then a */
  int32_t s2[] = {b[0xE4], b[0xB8], b['a']};
  o = stream_all(t, s2, 3, 0, &l);
  assert_string_equal(o, "\xEF\xBF\xBD" "a");
  free(o);
  /* E4 B8 then end of stream: flush gives U+FFFD */
  int32_t s3[] = {b['x'], b[0xE4], b[0xB8]};
  o = stream_all(t, s3, 3, 0, &l);
  assert_string_equal(o, "x\xEF\xBF\xBD");
  free(o);
  /* E4 B8 AD byte by byte = 中 */
  int32_t s4[] = {b[0xE4], b[0xB8], b[0xAD]};
  o = stream_all(t, s4, 3, 0, &l);
  assert_string_equal(o, "\xE4\xB8\xAD");
  free(o);
  /* ED A0 80 (a surrogate) is ill-formed: ED then A0 80 -> three U+FFFD (maximal subparts) */
  int32_t s5[] = {b[0xED], b[0xA0], b[0x80]};
  o = stream_all(t, s5, 3, 0, &l);
  assert_string_equal(o, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  free(o);
  /* a control token in the middle of a character: the prefix becomes U+FFFD */
  int32_t s6[] = {b[0xE4], tok_find(t, "<|im_end|>"), b['a']};
  o = stream_all(t, s6, 3, 0, &l);
  assert_string_equal(o, "\xEF\xBF\xBD<|im_end|>a");
  free(o);
  o = stream_all(t, s6 + 1, 2, TOK_SKIP_CONTROL, &l);
  assert_string_equal(o, "a");
  free(o);
  /* bad id: error, stream unchanged */
  tok_stream_t s;
  tok_stream_init(&s, t, 0);
  const char *txt;
  assert_int_equal(tok_stream_push(&s, b[0xE4], &txt, &l, &err), GT_OK);
  assert_int_equal(l, 0);
  assert_int_equal(tok_stream_push(&s, 5000, &txt, &l, &err), GT_EINVAL);
  assert_non_null(strstr(err.msg, "5000"));
  assert_int_equal(tok_stream_push(&s, b[0xB8], &txt, &l, &err), GT_OK);
  assert_int_equal(tok_stream_push(&s, b[0xAD], &txt, &l, &err), GT_OK);
  assert_int_equal(l, 3);
  assert_memory_equal(txt, "\xE4\xB8\xAD", 3);
  tok_stream_free(&s);
  tok_free(t);
}

/* ------------------------------------------------------------ qwen35 pre-tokenizer */

typedef struct {
  char pieces[16][64];
  int n;
} split_t;

static int collect(const char *p, size_t n, void *ud) {
  split_t *s = ud;
  if (s->n < 16 && n < 64) {
    memcpy(s->pieces[s->n], p, n);
    s->pieces[s->n][n] = 0;
  }
  s->n++;
  return 0;
}

static split_t split(const char *pre, const char *text) {
  tok_pretok_t *p;
  tok_pretok_scratch_t *s;
  gt_err_t err = {0};
  assert_int_equal(tok_pretok_new(pre, strlen(pre), &p, &err), GT_OK);
  assert_int_equal(tok_pretok_scratch_new(p, &s, &err), GT_OK);
  split_t r = {.n = 0};
  assert_int_equal(tok_pretok_split(p, s, text, strlen(text), collect, &r, &err), GT_OK);
  tok_pretok_scratch_free(s);
  tok_pretok_free(p);
  return r;
}

static void expect_split(const char *pre, const char *text, int n, ...) {
  split_t r = split(pre, text);
  va_list ap;
  va_start(ap, n);
  int ok = r.n == n;
  for (int i = 0; ok && i < n; i++) ok = strcmp(r.pieces[i], va_arg(ap, const char *)) == 0;
  va_end(ap);
  if (!ok) {
    fprintf(stderr, "%s split of \"%s\": got %d pieces:", pre, text, r.n);
    for (int i = 0; i < r.n && i < 16; i++) fprintf(stderr, " [%s]", r.pieces[i]);
    fprintf(stderr, "\n");
  }
  assert_true(ok);
}

/* Expectations follow from the two regexes (format/tok_pretok.c), alternatives tried in order
 * at each position:
 *   qwen2:  A='s.. | B=[^\r\n\p{L}\p{N}]?\p{L}+ | C=\p{N} | D= ?[^\s\p{L}\p{N}]+[\r\n]* | E,F,G=space
 *   qwen35: A | B'=[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+ | C | D'= ?[^\s\p{L}\p{M}\p{N}]+[\r\n]* | E,F,G
 * A combining mark (\p{M}) is not \p{L}: under qwen2 it ends a letter run (B) and is taken by
 * the punctuation rule D together with following non-letters; under qwen35 B' keeps it in the
 * word, and D' cannot take it. Texts without marks split identically. */
static void test_qwen35_pretokenizer(void **state) {
  (void)state;
  /* q + U+0301 (no precomposed form, so NFC keeps it) followed by '!':
   * qwen2: B takes "q"; at U+0301 B fails (its optional prefix may take the mark, but no letter
   * follows), D takes U+0301 and '!' (both [^\s\p{L}\p{N}]).   qwen35: B' takes "q\u0301"; D' takes "!". */
  expect_split("qwen2", "q\xCC\x81!", 2, "q", "\xCC\x81!");
  expect_split("qwen35", "q\xCC\x81!", 2, "q\xCC\x81", "!");
  /* Devanagari नमस्ते = न म स ् त े (virama U+094D and vowel sign e U+0947 are Mn):
   * qwen2: B "नमस"; at the virama B's optional non-letter prefix takes it and \p{L}+ takes त:
   * "्त"; then D "े".  qwen35: B' the whole word. */
  expect_split("qwen2", "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87", 3,
               "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8", "\xE0\xA5\x8D\xE0\xA4\xA4", "\xE0\xA5\x87");
  expect_split("qwen35", "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87", 1,
               "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87");
  /* " \u0301a": qwen2: B needs a letter after the optional space -> fails; D takes " \u0301";
   * then B "a".  qwen35: B' = optional ' ' then [\p{L}\p{M}]+ = " \u0301a". */
  expect_split("qwen2", " \xCC\x81" "a", 2, " \xCC\x81", "a");
  expect_split("qwen35", " \xCC\x81" "a", 1, " \xCC\x81" "a");
  /* Thai กี่ (ก + U+0E35 Mn + U+0E48 Mn), a space, a digit. qwen2: B "ก", D "ี่" (stops at the
   * space); qwen35: B' "กี่". Then both: " " (B, D need a letter / non-digit after it, F's
   * lookahead fails on '1', G takes it) and C "1". */
  expect_split("qwen2", "\xE0\xB8\x81\xE0\xB8\xB5\xE0\xB9\x88 1", 4, "\xE0\xB8\x81", "\xE0\xB8\xB5\xE0\xB9\x88", " ",
               "1");
  expect_split("qwen35", "\xE0\xB8\x81\xE0\xB8\xB5\xE0\xB9\x88 1", 3, "\xE0\xB8\x81\xE0\xB8\xB5\xE0\xB9\x88", " ",
               "1");
  /* mark-free texts split the same under both */
  const char *same[] = {"Hello, y'all! How are you 😁 ?我想在apple工作1314151天～",
                        "    indented    with    spaces   and trailing   ",
                        "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n", "12345×6789 = 83810205; 3.14159e-10",
                        "I'M HERE, YOU'LL SEE 'TIS", "нещо на Български"};
  for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
    split_t a = split("qwen2", same[i]), b = split("qwen35", same[i]);
    assert_int_equal(a.n, b.n);
    for (int k = 0; k < a.n && k < 16; k++) assert_string_equal(a.pieces[k], b.pieces[k]);
  }
  /* contractions are case-insensitive ((?i:'s|'t|...)): "'LL" is its own piece */
  expect_split("qwen2", "YOU'LL", 2, "YOU", "'LL");
  /* \s is Unicode White_Space as in HF's regex engine: U+3000 is, U+180E is not (PCRE2's own \s
   * would take it);
  * after '!', D's [^\s\p{L}\p{N}]+ stops at a space but runs on over U+180E (a format char) */
  expect_split("qwen2", "!\xE3\x80\x80", 2, "!", "\xE3\x80\x80");
  expect_split("qwen2", "!\xE1\xA0\x8E", 1, "!\xE1\xA0\x8E");
}

typedef struct {
  const char *base;
  size_t *ends, n;
} ends_t;

static int collect_end(const char *piece, size_t len, void *ud) {
  ends_t *e = ud;
  e->ends[e->n++] = (size_t)(piece - e->base) + len;
  return 0;
}

/* Long whitespace runs exhaust PCRE2's backtracking limits (its match limit, 10 million steps
 * by default) in [\s]*[\r\n]+; the splitter
 * then computes the whitespace alternatives itself (tok_pretok_ws_end). Reference: PCRE2's
 * interpreter on the same pattern with its limits lifted. */
static void test_pretok_whitespace_fallback(void **state) {
  (void)state;
  static const char *alpha[] = {" ", "\n", "\r", "\t", "\xC2\xA0", "\xE3\x80\x80", "\xE2\x80\xA8", "\xC2\x85",
                                "\x0B", "a", "1", "!", "\xCC\x81", "\xE1\xA0\x8E"};
  for (int pi = 0; pi < 2; pi++) {
    const char *pre = pi ? "qwen35" : "qwen2";
    tok_pretok_t *p;
    tok_pretok_scratch_t *sc;
    gt_err_t err = {0};
    assert_int_equal(tok_pretok_new(pre, strlen(pre), &p, &err), GT_OK);
    assert_int_equal(tok_pretok_scratch_new(p, &sc, &err), GT_OK);
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *ref =
        pcre2_compile((PCRE2_SPTR)tok_pretok_pattern(p), PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    assert_non_null(ref);
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    pcre2_set_match_limit(mc, UINT32_MAX);
    pcre2_set_depth_limit(mc, UINT32_MAX);
    pcre2_set_heap_limit(mc, UINT32_MAX);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(ref, NULL);
    /* 1. tok_pretok_ws_end == the regex wherever the regex's match is all whitespace */
    uint64_t r = 99;
    int compared = 0;
    for (int it = 0; it < 20000; it++) {
      char text[128];
      size_t n = 0;
      int len = 1 + it % 20;
      for (int i = 0; i < len; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        const char *a = alpha[(r >> 33) % (it % 3 ? 9 : 14)]; /* mostly whitespace */
        memcpy(text + n, a, strlen(a));
        n += strlen(a);
      }
      size_t off = 0;
      while (off < n) {
        assert_true(pcre2_match(ref, (PCRE2_SPTR)text, n, off, PCRE2_NO_JIT, md, mc) > 0);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t e = ov[1];
        int all_ws = 1;
        for (size_t k = off; k < e;) {
          uint32_t cp;
          size_t adv;
          int l = gt_utf8_next((const unsigned char *)text + k, e - k, &cp, &adv);
          all_ws &= l > 0 && ((cp >= 9 && cp <= 13) || cp == ' ' || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
                              (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
                              cp == 0x205F || cp == 0x3000);
          k += l > 0 ? (size_t)l : 1;
        }
        if (all_ws) {
          if (tok_pretok_ws_end(text, n, off) != e) fail_msg("%s: ws_end differs at %zu in iteration %d", pre, off, it);
          compared++;
        }
        off = e;
      }
    }
    assert_true(compared > 10000);
    /* 2. end to end on runs long enough for the JIT to give up (16 MB) */
    static const char *units[] = {" ", "\t ", "\n", " \t\n\r "}; /* no newline: [\s]* backtracks all */
    int gave_up = 0;
    for (size_t u = 0; u < 4; u++) {
      size_t ul = strlen(units[u]), n = 0, cap = 16u << 20;
      char *text = malloc(cap + 8);
      text[n++] = 'a';
      while (n + ul < cap) {
        memcpy(text + n, units[u], ul);
        n += ul;
      }
      text[n++] = 'x';
      pcre2_code *jit = pcre2_code_copy(ref);
      if (pcre2_jit_compile(jit, PCRE2_JIT_COMPLETE) == 0) { /* does the fallback run here? */
        int jrc = pcre2_jit_match(jit, (PCRE2_SPTR)text, n, 1, 0, md, NULL);
        gave_up += jrc == PCRE2_ERROR_MATCHLIMIT || jrc == PCRE2_ERROR_JIT_STACKLIMIT;
      } else {
        gave_up++; /* no JIT: the interpreter's match limit is the same */
      }
      pcre2_code_free(jit);
      size_t *got = malloc(8 * sizeof *got);
      ends_t gw = {text, got, 0};
      /* pieces: "a", the run up to its last newline (or all but its last space), the rest */
      assert_int_equal(tok_pretok_split(p, sc, text, n, collect_end, &gw, &err), GT_OK);
      assert_true(gw.n >= 3 && gw.n <= 4);
      assert_int_equal(got[0], 1);
      assert_int_equal(got[1], tok_pretok_ws_end(text, n, 1));
      assert_int_equal(got[gw.n - 1], n);
      free(got);
      free(text);
    }
    assert_true(gave_up >= 2);
    pcre2_match_data_free(md);
    pcre2_match_context_free(mc);
    pcre2_code_free(ref);
    tok_pretok_scratch_free(sc);
    tok_pretok_free(p);
  }
}

/* A tokenizer over the 256 byte tokens plus merges that join "q" with U+0301 (bytes CC 81):
 * the ids then show where the pre-tokenizer cut. */
static tok_t *mark_vocab(const char *pre, gt_err_t *err, int *rc) {
  static char texts[300][8];
  static const char *tokens[300];
  static size_t lens[300];
  size_t n = 0;
  for (int b = 0; b < 256; b++, n++) {
    int l = gt_utf8_put(tok_byte_to_cp((uint8_t)b), texts[n]);
    tokens[n] = texts[n];
    lens[n] = (size_t)l;
  }
  char cc[4], c81[4];
  int lcc = gt_utf8_put(tok_byte_to_cp(0xCC), cc), l81 = gt_utf8_put(tok_byte_to_cp(0x81), c81);
  /* token 256 = CC 81 (U+0301), token 257 = q CC 81 */
  memcpy(texts[256], cc, (size_t)lcc);
  memcpy(texts[256] + lcc, c81, (size_t)l81);
  tokens[256] = texts[256];
  lens[256] = (size_t)(lcc + l81);
  texts[257][0] = 'q';
  memcpy(texts[257] + 1, texts[256], lens[256]);
  tokens[257] = texts[257];
  lens[257] = 1 + lens[256];
  n = 258;
  static char m0[16], m1[16];
  static const char *merges[2];
  static size_t mlens[2];
  snprintf(m0, sizeof m0, "%.*s %.*s", lcc, cc, l81, c81);
  snprintf(m1, sizeof m1, "q %.*s", (int)lens[256], texts[256]);
  merges[0] = m0;
  merges[1] = m1;
  mlens[0] = strlen(m0);
  mlens[1] = strlen(m1);
  tok_spec_t sp = {.model = "gpt2", .model_len = 4, .pre = pre, .pre_len = strlen(pre), .n_vocab = n,
                   .tokens = tokens, .token_lens = lens, .n_merges = 2, .merges = merges, .merge_lens = mlens,
                   .bos = -1, .eos = -1, .eot = -1, .pad = -1};
  tok_t *t = NULL;
  *rc = tok_build(&sp, &t, err);
  return t;
}

static void test_qwen35_encode(void **state) {
  (void)state;
  gt_err_t err = {0};
  int rc;
  tok_t *t2 = mark_vocab("qwen2", &err, &rc), *t35 = mark_vocab("qwen35", &err, &rc);
  assert_int_equal(rc, GT_OK);
  assert_string_equal(tok_pre_name(t35), "qwen35");
  assert_int_equal(tok_n_merges(t35), 2);
  int32_t *ids;
  size_t n;
  /* qwen2: "q" | "\u0301" -> [q, 256]; qwen35: "q\u0301" -> [257] */
  assert_int_equal(tok_encode(t2, "q\xCC\x81", 3, 0, &ids, &n, &err), GT_OK);
  assert_int_equal(n, 2);
  assert_int_equal(ids[0], 'q'); /* token b of this vocab is byte b */
  assert_int_equal(ids[1], 256);
  free(ids);
  assert_int_equal(tok_encode(t35, "q\xCC\x81", 3, 0, &ids, &n, &err), GT_OK);
  assert_int_equal(n, 1);
  assert_int_equal(ids[0], 257);
  free(ids);
  tok_free(t2);
  tok_free(t35);
}

/* ------------------------------------------------------------ NFC */

static void test_nfc(void **state) {
  (void)state;
  /* The inert set really is inert: NFC-stable, class 0, never the non-first part of any
   * character's canonical decomposition (so never composed onto a preceding character). */
  for (unsigned cp = 0; cp < 0x110000; cp++) {
    if (tok_nfc_is_inert(cp)) {
      const utf8proc_property_t *pr = utf8proc_get_property((utf8proc_int32_t)cp);
      assert_int_equal(pr->combining_class, 0);
      char u[4];
      int l = gt_utf8_put(cp, u);
      utf8proc_uint8_t *nf = NULL;
      utf8proc_ssize_t k = utf8proc_map((const utf8proc_uint8_t *)u, l, &nf, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
      if (k != l || memcmp(nf, u, (size_t)l) != 0) fail_msg("NFC changes inert U+%04X", cp);
      free(nf);
    }
    utf8proc_int32_t d[32];
    utf8proc_ssize_t k = utf8proc_decompose_char((utf8proc_int32_t)cp, d, 32, UTF8PROC_DECOMPOSE, NULL);
    for (utf8proc_ssize_t j = 1; j < k; j++)
      if (tok_nfc_is_inert((unsigned)d[j])) fail_msg("U+%04X decomposes with inert U+%04X at %d", cp, d[j], (int)j);
  }
  /* Differential check against utf8proc over the whole text, random mixes of inert characters,
   * composable starters, marks, jamo and kana. */
  static const unsigned pool[] = {'a', 'e', 'A', ' ', '>', 0x301, 0x323, 0x302, 0x338, 0x5B0, 0x94D, 0x1100,
                                  0x1161, 0x11A8, 0xAC00, 0x304B, 0x3099, 0x309A, 0x4E2D, 0x3002, 0x439, 0x306,
                                  0x212B, 0xF900, 0x0E35, 0x1E0A, 0xE9, 0x3000, 0x41, 0x30AB, 0xFF76, 0xFF9E};
  uint64_t r = 12345;
  for (int it = 0; it < 20000; it++) {
    char s[128];
    size_t n = 0;
    int len = 1 + (int)(r % 12);
    for (int i = 0; i < len; i++) {
      r = r * 6364136223846793005ull + 1442695040888963407ull;
      n += (size_t)gt_utf8_put(pool[(r >> 33) % (sizeof pool / sizeof *pool)], s + n);
    }
    char *owned;
    const char *out;
    size_t olen;
    gt_err_t err = {0};
    assert_int_equal(tok_nfc(s, n, &owned, &out, &olen, &err), GT_OK);
    utf8proc_uint8_t *ref = NULL;
    utf8proc_ssize_t rl = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &ref,
                                       UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    assert_true(rl >= 0);
    if ((size_t)rl != olen || memcmp(ref, out, olen) != 0) fail_msg("NFC differs on iteration %d", it);
    free(ref);
    free(owned);
  }
}

/* ------------------------------------------------------------ errors */

/* Minimal GGUF v3 writer (metadata only) for error-path files. */
typedef struct {
  char *b;
  size_t n, cap;
} wbuf_t;
static void wb(wbuf_t *w, const void *p, size_t n) {
  while (w->n + n > w->cap) w->b = realloc(w->b, w->cap = w->cap ? w->cap * 2 : 1024);
  memcpy(w->b + w->n, p, n);
  w->n += n;
}
static void wu32(wbuf_t *w, uint32_t v) { wb(w, &v, 4); }
static void wu64(wbuf_t *w, uint64_t v) { wb(w, &v, 8); }
static void wstr(wbuf_t *w, const char *s) {
  wu64(w, strlen(s));
  wb(w, s, strlen(s));
}
static void kv_str(wbuf_t *w, const char *k, const char *v) {
  wstr(w, k);
  wu32(w, GGUF_VT_STRING);
  wstr(w, v);
}

/* GGUF with model/pre and the 256 byte tokens (+ <|im_end|> as control); no merges key when
 * with_merges is 0. */
static char *tiny_gguf(const char *model, const char *pre, int with_merges, size_t *len) {
  wbuf_t w = {0};
  wu32(&w, 0x46554747u);
  wu32(&w, 3);
  wu64(&w, 0);
  wu64(&w, with_merges ? 5 : 4);
  kv_str(&w, "tokenizer.ggml.model", model);
  kv_str(&w, "tokenizer.ggml.pre", pre);
  wstr(&w, "tokenizer.ggml.tokens");
  wu32(&w, GGUF_VT_ARRAY);
  wu32(&w, GGUF_VT_STRING);
  wu64(&w, 257);
  for (int b = 0; b < 256; b++) {
    char u[5];
    u[gt_utf8_put(tok_byte_to_cp((uint8_t)b), u)] = 0;
    wstr(&w, u);
  }
  wstr(&w, "<|im_end|>");
  wstr(&w, "tokenizer.ggml.token_type");
  wu32(&w, GGUF_VT_ARRAY);
  wu32(&w, GGUF_VT_INT32);
  wu64(&w, 257);
  for (int b = 0; b < 257; b++) wu32(&w, b < 256 ? 1 : 3);
  if (with_merges) {
    wstr(&w, "tokenizer.ggml.merges");
    wu32(&w, GGUF_VT_ARRAY);
    wu32(&w, GGUF_VT_STRING);
    wu64(&w, 1);
    wstr(&w, "h i");
  }
  while (w.n % 32) wb(&w, "", 1);
  *len = w.n;
  return w.b;
}

static int load_buf(const char *model, const char *pre, int with_merges, tok_t **t, gt_err_t *err) {
  size_t n;
  char *buf = tiny_gguf(model, pre, with_merges, &n);
  gguf_t *g;
  int rc = gguf_open_buffer(buf, n, &g, err);
  assert_int_equal(rc, GT_OK);
  rc = tok_load(g, t, err);
  gguf_close(g);
  free(buf);
  return rc;
}

static void test_errors(void **state) {
  (void)state;
  gt_err_t err = {0};
  tok_t *t = NULL;
  /* a well-formed tiny file loads, and g may be closed before use (the merge "h i" is unusable:
   * "hi" is not in the vocab, so it is skipped) */
  assert_int_equal(load_buf("gpt2", "qwen35", 1, &t, &err), GT_OK);
  assert_int_equal(tok_n_merges(t), 0);
  int32_t *ids;
  size_t n;
  assert_int_equal(tok_encode(t, "hi<|im_end|>", 12, TOK_SPECIAL, &ids, &n, &err), GT_OK);
  assert_int_equal(n, 3);
  assert_int_equal(ids[2], 256);
  free(ids);
  /* invalid UTF-8 input */
  assert_int_equal(tok_encode(t, "ab\xC3(", 4, 0, &ids, &n, &err), GT_EINVAL);
  assert_null(ids);
  assert_non_null(strstr(err.msg, "byte 2"));
  assert_int_equal(tok_encode(t, "\xE4\xB8", 2, 0, &ids, &n, &err), GT_EINVAL); /* truncated */
  assert_int_equal(tok_encode(t, "\xED\xA0\x80", 3, 0, &ids, &n, &err), GT_EINVAL); /* surrogate */
  assert_int_equal(tok_encode(t, "", 0, 0, &ids, &n, &err), GT_OK);
  assert_int_equal(n, 0);
  /* decode of an id out of range */
  int32_t bad[] = {1, 257};
  char *out;
  size_t ol;
  assert_int_equal(tok_decode(t, bad, 2, 0, &out, &ol, &err), GT_EINVAL);
  assert_non_null(strstr(err.msg, "257"));
  assert_null(tok_piece(t, -1, &ol));
  assert_null(tok_piece(t, 257, &ol));
  tok_free(t);
  t = NULL;

  /* tok_build validation */
  const char *few[] = {"a", "b"};
  size_t few_l[] = {1, 1};
  int32_t few_ty[] = {1, 9};
  tok_spec_t sp = {.model = "gpt2", .model_len = 4, .pre = "qwen2", .pre_len = 5, .n_vocab = 2, .tokens = few,
                   .token_lens = few_l, .bos = -1, .eos = -1, .eot = -1, .pad = -1};
  assert_int_equal(tok_build(&sp, &t, &err), GT_EFORMAT); /* no token for most bytes */
  assert_non_null(strstr(err.msg, "no token for byte 0x00"));
  assert_null(t);
  sp.types = few_ty;
  assert_int_equal(tok_build(&sp, &t, &err), GT_EFORMAT);
  assert_non_null(strstr(err.msg, "unknown type 9"));
  sp.types = NULL;
  sp.eos = 2;
  assert_int_equal(tok_build(&sp, &t, &err), GT_EFORMAT);
  assert_non_null(strstr(err.msg, "eos token id 2"));
  sp.eos = -1;
  sp.n_vocab = 0;
  assert_int_equal(tok_build(&sp, &t, &err), GT_EFORMAT);

  assert_int_equal(load_buf("llama", "qwen2", 1, &t, &err), GT_EUNSUPPORTED);
  assert_null(t);
  assert_non_null(strstr(err.msg, "\"llama\""));
  assert_int_equal(load_buf("gpt2", "falcon", 1, &t, &err), GT_EUNSUPPORTED);
  assert_non_null(strstr(err.msg, "\"falcon\""));
  assert_int_equal(load_buf("gpt2", "qwen2", 0, &t, &err), GT_EFORMAT);
  assert_non_null(strstr(err.msg, "tokenizer.ggml.merges"));
  assert_null(t);
}

/* ------------------------------------------------------------ BPE vs a naive reference */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

typedef struct {
  char **sorted; /* "left right\0rank" strings sorted by text: rank stored after the NUL */
  size_t n;
} ref_merges_t;

static long ref_rank(const ref_merges_t *m, const char *l, const char *r) {
  char key[1024];
  snprintf(key, sizeof key, "%s %s", l, r);
  const char *k = key;
  char **hit = bsearch(&k, m->sorted, m->n, sizeof *m->sorted, cmp_str);
  if (!hit) return -1;
  long rank;
  memcpy(&rank, *hit + strlen(*hit) + 1, sizeof rank);
  return rank;
}

/* Textbook BPE on strings (lowest rank first, leftmost on ties), quadratic and independent of
 * the tokenizer's id-based heap: returns the ids of one pre-tokenized word. */
static size_t ref_bpe(const tok_t *t, const ref_merges_t *m, const char *word, size_t n, int32_t *out) {
  char **sym = malloc(n * sizeof *sym);
  size_t ns = n;
  for (size_t i = 0; i < n; i++) {
    sym[i] = malloc(1024);
    sym[i][gt_utf8_put(tok_byte_to_cp((uint8_t)word[i]), sym[i])] = 0;
  }
  for (;;) {
    long best = -1;
    size_t at = 0;
    for (size_t i = 0; i + 1 < ns; i++) {
      long r = ref_rank(m, sym[i], sym[i + 1]);
      if (r >= 0 && (best < 0 || r < best)) {
        best = r;
        at = i;
      }
    }
    if (best < 0) break;
    strcat(sym[at], sym[at + 1]);
    free(sym[at + 1]);
    memmove(sym + at + 1, sym + at + 2, (ns - at - 2) * sizeof *sym);
    ns--;
  }
  for (size_t i = 0; i < ns; i++) {
    out[i] = tok_find(t, sym[i]);
    free(sym[i]);
  }
  free(sym);
  return ns;
}

static void test_bpe_long_words_match_reference(void **state) {
  (void)state;
  gguf_t *g;
  tok_t *t = load_tok("qwen3-vocab.gguf", &g);
  gguf_vtype_t et;
  uint64_t nm;
  assert_int_equal(gguf_get_arr(g, "tokenizer.ggml.merges", &et, &nm), GT_OK);
  ref_merges_t m = {malloc(nm * sizeof(char *)), (size_t)nm};
  for (uint64_t i = 0; i < nm; i++) {
    const char *s;
    size_t l;
    assert_int_equal(gguf_arr_str(g, "tokenizer.ggml.merges", i, &s, &l), GT_OK);
    m.sorted[i] = malloc(l + 1 + sizeof(long));
    memcpy(m.sorted[i], s, l);
    m.sorted[i][l] = 0;
    long rank = (long)i;
    memcpy(m.sorted[i] + l + 1, &rank, sizeof rank);
  }
  qsort(m.sorted, m.n, sizeof *m.sorted, cmp_str);
  /* single-word texts (one \p{L}+ run each under qwen2) of 25..220 bytes: above the quadratic
   * scan's limit, so the heap path runs */
  static const char *alpha[] = {"a", "b", "e", "n", "t", "s", "中", "文", "的", "é", "ж", "ა"};
  uint64_t r = 7;
  int32_t want[512], *got;
  size_t ngot;
  gt_err_t err = {0};
  for (int it = 0; it < 40; it++) {
    char w[1400];
    size_t n = 0;
    size_t target = 25 + (size_t)(it * 5);
    int uniform = it % 5 == 0; /* runs of one letter: all pairs of equal rank */
    while (n < target) {
      r = r * 6364136223846793005ull + 1442695040888963407ull;
      const char *a = alpha[uniform ? (size_t)it % 6 : (r >> 33) % (sizeof alpha / sizeof *alpha)];
      memcpy(w + n, a, strlen(a));
      n += strlen(a);
    }
    size_t nw = ref_bpe(t, &m, w, n, want);
    assert_int_equal(tok_encode(t, w, n, 0, &got, &ngot, &err), GT_OK);
    if (ngot != nw || memcmp(got, want, nw * sizeof *got) != 0) {
      print_ids("got ", got, ngot);
      print_ids("want", want, nw);
      fail_msg("BPE differs from the reference on word %d (%zu bytes)", it, n);
    }
    free(got);
  }
  for (size_t i = 0; i < m.n; i++) free(m.sorted[i]);
  free(m.sorted);
  tok_free(t);
  gguf_close(g);
}

/* ------------------------------------------------------------ threads */

typedef struct {
  const tok_t *t;
  json_t *cases;
  int bad;
} thr_arg_t;

static void *thr_encode(void *p) {
  thr_arg_t *a = p;
  for (int rep = 0; rep < 5; rep++) {
    for (size_t i = 0; i < json_array_size(a->cases); i++) {
      json_t *c = json_array_get(a->cases, i);
      json_t *jt = json_object_get(c, "text"), *ji = json_object_get(c, "ids");
      int32_t *ids;
      size_t n;
      gt_err_t err = {0};
      if (tok_encode(a->t, json_string_value(jt), json_string_length(jt), TOK_SPECIAL, &ids, &n, &err) != GT_OK ||
          n != json_array_size(ji)) {
        a->bad++;
        continue;
      }
      for (size_t k = 0; k < n; k++) a->bad += ids[k] != (int32_t)json_integer_value(json_array_get(ji, k));
      free(ids);
    }
  }
  return NULL;
}

/* One tok_t shared by several threads (the word cache is the only shared mutable state). */
static void test_threads_share_tokenizer(void **state) {
  (void)state;
  tok_t *t = load_tok("qwen3-vocab.gguf", NULL);
  json_t *cases = tu_json("qwen3-tokenizer-cases.json");
  pthread_t th[4];
  thr_arg_t args[4];
  for (int i = 0; i < 4; i++) {
    args[i] = (thr_arg_t){t, cases, 0};
    assert_int_equal(pthread_create(&th[i], NULL, thr_encode, &args[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(args[i].bad, 0);
  }
  json_decref(cases);
  tok_free(t);
}

/* ------------------------------------------------------------ fuzz regressions */

static void test_fuzz_regressions(void **state) {
  (void)state;
  const char *src = getenv("GANTRY_SRC");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/tests/fuzz/regress/tokenizer", src ? src : ".");
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.' || strcmp(e->d_name, "README.md") == 0) continue;
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    size_t len;
    char *buf = tu_read_file(path, &len);
    assert_non_null(buf);
    assert_int_equal(LLVMFuzzerTestOneInput((const uint8_t *)buf, len), 0);
    if (strncmp(e->d_name, "seed-gguf", 9) == 0) { /* these seeds must reach the tokenizer */
      gt_err_t err = {0};
      gguf_t *g;
      tok_t *t;
      assert_int_equal(gguf_open_buffer(buf + 1, len - 1, &g, &err), GT_OK);
      if (tok_load(g, &t, &err) != GT_OK) fail_msg("%s: %s", e->d_name, err.msg);
      tok_free(t);
      gguf_close(g);
    }
    free(buf);
    n++;
  }
  closedir(d);
  assert_true(n >= 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_qwen3_vocab_cases),    cmocka_unit_test(test_qwen3_chat_template_ids),    cmocka_unit_test(test_tiny_models_manifest),
      cmocka_unit_test(test_demo_model_prompts),   cmocka_unit_test(test_encode_spans),   cmocka_unit_test(test_special_tokens_plain_text),
      cmocka_unit_test(test_stream_multibyte),     cmocka_unit_test(test_stream_invalid_bytes),
      cmocka_unit_test(test_qwen35_pretokenizer),  cmocka_unit_test(test_pretok_whitespace_fallback),  cmocka_unit_test(test_qwen35_encode),
      cmocka_unit_test(test_nfc),                  cmocka_unit_test(test_errors),
      cmocka_unit_test(test_bpe_long_words_match_reference), cmocka_unit_test(test_threads_share_tokenizer), cmocka_unit_test(test_fuzz_regressions),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
