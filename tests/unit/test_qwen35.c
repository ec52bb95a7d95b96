/* tests/unit/test_qwen35.c — the qwen35 hybrid model (Gated DeltaNet + gated attention) on the
 * CPU backend against the golden fixtures (tests/golden/manifest.json models.qwen35-tiny):
 * - teacher-forced logits over all_ids, stored rows within 1e-3 max row relative error;
 * - greedy continuation == generated_ids up to the first position whose reference top-1 margin
 *   (from the logits file) is < 1e-3;
 * - the same logits when the prompt is fed in chunks of 7 tokens and token by token, and when
 *   two sequences share one batch (with prefill and decode mixed);
 * - state_copy snapshot / restore reproduces a continuation exactly;
 * - a batch without state slots is refused with a clear error;
 * - loader: MTP (nextn) blocks are loaded and counted without changing the logits; missing
 *   tensors and inconsistent metadata are refused with messages naming them (variants of the
 *   tiny file written with engine/gguf_write.h).
 * Prints the max error per case and the CPU decode speed (informational, not asserted). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/backend.h"
#include "engine/gguf.h"
#include "engine/gguf_write.h"
#include "engine/model.h"
#include "tests/common/testutil.h"

#define TOL 1e-3
#define MARGIN_MIN 1e-3
#define BLOCK_TOKENS 16
#define MAX_BLOCKS 64 /* per sequence: 1024 tokens */
#define N_SLOTS 4
#define MAX_TOKENS 1024
/* one thread: OpenMP spin-waits make a 2-thread run 10x slower on a loaded 2-core CI machine */
#define N_THREADS 1

typedef struct {
  int n_prompt, n_all, first_row, rows, vocab;
  int32_t *all;      /* [n_all] prompt + generated */
  float *ref;        /* [rows, vocab] */
  float *tf;         /* [n_all, vocab] our teacher-forced logits (one prefill), set by the test */
  char name[64];
} gcase_t;

typedef struct {
  gguf_t *g;
  be_t *be;
  model_t *m;
  int n_cases;
  gcase_t cases[8];
} fx_t;

static fx_t F;

static int setup(void **state) {
  (void)state;
  gt_err_t err = {0};
  json_t *man = tu_json("manifest.json");
  json_t *mod = json_object_get(json_object_get(man, "models"), "qwen35-tiny");
  assert_non_null(mod);
  const char *gg = json_string_value(json_object_get(json_object_get(mod, "gguf"), "bf16"));
  assert_non_null(gg);
  if (gguf_open(tu_golden(gg), &F.g, &err)) fail_msg("gguf_open %s: %s", gg, err.msg);
  if (be_cpu_create(N_THREADS, &F.be, &err)) fail_msg("be_cpu_create: %s", err.msg);
  if (model_load(F.g, F.be, MAX_TOKENS, &F.m, &err)) fail_msg("model_load: %s", err.msg);
  if (model_cache_init(F.m, N_SLOTS * MAX_BLOCKS, BLOCK_TOKENS, N_SLOTS, &err)) fail_msg("model_cache_init: %s", err.msg);
  json_t *cases = json_object_get(mod, "cases");
  F.n_cases = (int)json_array_size(cases);
  assert_true(F.n_cases >= 1 && F.n_cases <= 8);
  for (int i = 0; i < F.n_cases; i++) {
    json_t *c = json_array_get(cases, i);
    gcase_t *gc = &F.cases[i];
    json_t *all = json_object_get(c, "all_ids"), *shape = json_object_get(c, "logits_shape");
    gc->n_all = (int)json_array_size(all);
    gc->n_prompt = (int)json_array_size(json_object_get(c, "prompt_ids"));
    gc->first_row = (int)json_integer_value(json_object_get(c, "logits_first_row"));
    gc->rows = (int)json_integer_value(json_array_get(shape, 0));
    gc->vocab = (int)json_integer_value(json_array_get(shape, 1));
    assert_int_equal(gc->vocab, F.m->hp.n_vocab);
    assert_true(gc->n_all <= MAX_TOKENS && gc->first_row + gc->rows <= gc->n_all);
    gc->all = malloc(sizeof(int32_t) * gc->n_all);
    for (int t = 0; t < gc->n_all; t++) gc->all[t] = (int32_t)json_integer_value(json_array_get(all, t));
    size_t len = 0;
    const char *lf = json_string_value(json_object_get(c, "logits_file"));
    gc->ref = tu_read_file(tu_golden(lf), &len);
    assert_non_null(gc->ref);
    assert_int_equal(len, sizeof(float) * (size_t)gc->rows * gc->vocab);
    snprintf(gc->name, sizeof gc->name, "case%d", i);
  }
  json_decref(man);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  for (int i = 0; i < F.n_cases; i++) {
    free(F.cases[i].all);
    free(F.cases[i].ref);
    free(F.cases[i].tf);
  }
  model_free(F.m);
  be_destroy(F.be);
  gguf_close(F.g);
  return 0;
}

/* ---- running steps ---- */
enum { OUT_NONE = 0, OUT_LAST, OUT_ALL };
typedef struct {
  int slot;            /* recurrent-state slot; KV blocks [slot*MAX_BLOCKS, +MAX_BLOCKS) */
  const int32_t *ids;  /* the sequence's tokens from position 0 */
  int pos0, n;         /* this step feeds ids[pos0, pos0+n) */
  int out;             /* OUT_* */
} seqstep_t;

/* Runs one step over n_seq sequences; logits rows follow the sequences' order. Returns rows. */
static int run_step(const seqstep_t *ss, int n_seq, float *logits) {
  int32_t tok[MAX_TOKENS], pos[MAX_TOKENS], first[4], ntok[4], slot[4], out[MAX_TOKENS];
  int32_t bt[4 * MAX_BLOCKS];
  int t = 0, n_out = 0;
  assert_true(n_seq <= 4);
  for (int s = 0; s < n_seq; s++) {
    first[s] = t;
    ntok[s] = ss[s].n;
    slot[s] = ss[s].slot;
    for (int i = 0; i < MAX_BLOCKS; i++) bt[s * MAX_BLOCKS + i] = ss[s].slot * MAX_BLOCKS + i;
    for (int i = 0; i < ss[s].n; i++, t++) {
      assert_true(t < MAX_TOKENS);
      tok[t] = ss[s].ids[ss[s].pos0 + i];
      pos[t] = ss[s].pos0 + i;
      if (ss[s].out == OUT_ALL || (ss[s].out == OUT_LAST && i == ss[s].n - 1)) out[n_out++] = t;
    }
  }
  be_batch_t b = {.n_tok = t, .n_seq = n_seq, .tok = tok, .pos = pos, .seq_first = first, .seq_ntok = ntok,
                  .block_table = bt, .max_blocks = MAX_BLOCKS, .state_slot = slot, .n_out = n_out, .out_tok = out};
  gt_err_t err = {0};
  int rc = model_forward(F.m, &b, logits, &err);
  if (rc) fail_msg("model_forward: %s (%s)", err.msg, gt_err_name(rc));
  return n_out;
}

/* Feeds ids[0, n) of one sequence in chunks of `chunk` tokens, logits of every token into
 * all [n, vocab]. */
static void feed_chunked(int slot, const int32_t *ids, int n, int chunk, float *all) {
  const int V = F.m->hp.n_vocab;
  for (int p = 0; p < n; p += chunk) {
    seqstep_t s = {slot, ids, p, p + chunk <= n ? chunk : n - p, OUT_ALL};
    run_step(&s, 1, all + (size_t)p * V);
  }
}

/* Max row relative error of the stored reference rows against logits of all tokens. */
static double case_err(const gcase_t *c, const float *all) {
  return tu_max_row_rel_err(all + (size_t)c->first_row * c->vocab, c->ref, c->rows, c->vocab);
}

static int argmax(const float *x, int n) {
  int best = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[best]) best = i;
  return best;
}

static double ref_margin(const gcase_t *c, int row) {
  const float *r = c->ref + (size_t)row * c->vocab;
  double a = -INFINITY, b = -INFINITY;
  for (int i = 0; i < c->vocab; i++) {
    if (r[i] > a) {
      b = a;
      a = r[i];
    } else if (r[i] > b) {
      b = r[i];
    }
  }
  return a - b;
}

/* ---- tests ---- */
static void test_hparams(void **state) {
  (void)state;
  const model_hparams_t *hp = &F.m->hp;
  assert_string_equal(hp->arch, "qwen35");
  assert_int_equal(hp->n_layer, 4);
  assert_int_equal(hp->n_attn_layers, 1);
  assert_int_equal(hp->n_gdn_layers, 3);
  assert_int_equal(hp->full_attn_interval, 4);
  assert_int_equal(hp->conv_kernel, 4);
  assert_int_equal(hp->gdn_n_k, 2);
  assert_int_equal(hp->gdn_n_v, 4);
  assert_int_equal(hp->gdn_d_k, 64);
  assert_int_equal(hp->gdn_d_v, 64);
  assert_int_equal(hp->n_rot, 16);
  assert_int_equal(hp->head_dim, 64);
  assert_int_equal(hp->n_nextn, 0);
  assert_int_equal(hp->tied_output, 0);
  /* 3 GDN layers x (3 * 512 conv state + 4 * 64 * 64 recurrent state) floats */
  assert_int_equal(model_state_bytes_per_slot(F.m), 4 * 3 * (3 * 512 + 4 * 64 * 64));
  assert_int_equal(model_kv_bytes_per_token(F.m), 2 * 4 * 1 * 2 * 64);
}

/* One prefill over all_ids per case; keeps the logits in F.cases[i].tf. */
static const float *teacher_forced(int i) {
  gcase_t *c = &F.cases[i];
  if (!c->tf) {
    c->tf = malloc(sizeof(float) * (size_t)c->n_all * c->vocab);
    assert_non_null(c->tf);
    feed_chunked(0, c->all, c->n_all, c->n_all, c->tf);
  }
  return c->tf;
}

static void test_teacher_forced(void **state) {
  (void)state;
  for (int i = 0; i < F.n_cases; i++) {
    const gcase_t *c = &F.cases[i];
    const float *all = teacher_forced(i);
    double e = case_err(c, all);
    print_message("qwen35-tiny bf16 %s (%d tokens): teacher-forced max row rel err %.3g\n", c->name, c->n_all, e);
    if (e > TOL) fail_msg("%s: max row rel err %.3g > %.0e", c->name, e, TOL);
  }
}

static void test_greedy(void **state) {
  (void)state;
  const int V = F.m->hp.n_vocab;
  float *lg = malloc(sizeof(float) * V);
  double decode_s = 0;
  int decode_n = 0;
  for (int i = 0; i < F.n_cases; i++) {
    const gcase_t *c = &F.cases[i];
    int32_t *seq = malloc(sizeof(int32_t) * c->n_all);
    memcpy(seq, c->all, sizeof(int32_t) * c->n_prompt);
    seqstep_t s = {1, seq, 0, c->n_prompt, OUT_LAST};
    run_step(&s, 1, lg);
    int checked = 0;
    for (int j = 0; c->n_prompt + j < c->n_all; j++) {
      const int pos = c->n_prompt + j; /* position of the generated token */
      const int row = pos - 1 - c->first_row;
      if (row >= 0 && ref_margin(c, row) < MARGIN_MIN) break;
      int tk = argmax(lg, V);
      if (tk != c->all[pos]) fail_msg("%s: greedy token %d is %d, expected %d", c->name, j, tk, c->all[pos]);
      checked++;
      seq[pos] = tk;
      if (pos + 1 >= c->n_all) break;
      struct timespec t0, t1;
      clock_gettime(CLOCK_MONOTONIC, &t0);
      seqstep_t d = {1, seq, pos, 1, OUT_LAST};
      run_step(&d, 1, lg);
      clock_gettime(CLOCK_MONOTONIC, &t1);
      decode_s += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
      decode_n++;
    }
    print_message("qwen35-tiny bf16 %s: greedy matches %d/%d generated tokens\n", c->name, checked,
                  c->n_all - c->n_prompt);
    assert_true(checked > 0);
    free(seq);
  }
  print_message("qwen35-tiny CPU decode: %.1f tok/s (%d single-token steps, %d thread(s))\n",
                decode_n / (decode_s > 0 ? decode_s : 1e-9), decode_n, N_THREADS);
  free(lg);
}

/* Chunks of 7 and token by token give the same logits as one prefill (and the reference). */
static void test_chunked_prefill(void **state) {
  (void)state;
  static const int chunks[] = {7, 1};
  for (int i = 0; i < F.n_cases; i++) {
    const gcase_t *c = &F.cases[i];
    const size_t n = (size_t)c->n_all * c->vocab;
    const float *one = teacher_forced(i);
    float *part = malloc(sizeof(float) * n);
    for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
      if (chunks[k] == 1 && c->n_all > 100) continue; /* token by token on the short cases (time) */
      feed_chunked(2, c->all, c->n_all, chunks[k], part);
      double e = case_err(c, part), d = tu_max_row_rel_err(part, one, c->n_all, c->vocab);
      print_message("%s chunk %d: ref err %.3g, vs one prefill %.3g\n", c->name, chunks[k], e, d);
      if (e > TOL) fail_msg("%s chunk %d: max row rel err %.3g > %.0e", c->name, chunks[k], e, TOL);
      if (d > 1e-5) fail_msg("%s chunk %d: differs from one prefill by %.3g", c->name, chunks[k], d);
    }
    free(part);
  }
}

/* Two sequences in one batch: two prefills together, then one decoding while the other prefills. */
static void test_two_sequences(void **state) {
  (void)state;
  const gcase_t *a = &F.cases[0], *b = &F.cases[F.n_cases > 2 ? 2 : F.n_cases - 1];
  const int V = F.m->hp.n_vocab;
  float *la = malloc(sizeof(float) * (size_t)a->n_all * V), *lb = malloc(sizeof(float) * (size_t)b->n_all * V);
  float *tmp = malloc(sizeof(float) * (size_t)(a->n_all + b->n_all) * V);
  /* step 1: a's prompt and the first 10 tokens of b */
  seqstep_t s1[2] = {{3, a->all, 0, a->n_prompt, OUT_ALL}, {1, b->all, 0, 10, OUT_ALL}};
  run_step(s1, 2, tmp);
  memcpy(la, tmp, sizeof(float) * (size_t)a->n_prompt * V);
  memcpy(lb, tmp + (size_t)a->n_prompt * V, sizeof(float) * 10 * V);
  /* then a decodes one token per step while b prefills 5 per step (b first in the batch) */
  int pa = a->n_prompt, pb = 10;
  while (pa < a->n_all || pb < b->n_all) {
    seqstep_t s[2];
    int n = 0, ra = -1, rb = -1;
    if (pb < b->n_all) {
      int k = b->n_all - pb < 5 ? b->n_all - pb : 5;
      rb = n;
      s[n++] = (seqstep_t){1, b->all, pb, k, OUT_ALL};
    }
    if (pa < a->n_all) {
      ra = n;
      s[n++] = (seqstep_t){3, a->all, pa, 1, OUT_ALL};
    }
    run_step(s, n, tmp);
    int off = 0;
    for (int j = 0; j < n; j++) {
      float *dst = j == ra ? la + (size_t)pa * V : lb + (size_t)pb * V;
      memcpy(dst, tmp + (size_t)off * V, sizeof(float) * (size_t)s[j].n * V);
      off += s[j].n;
    }
    if (ra >= 0) pa += 1;
    if (rb >= 0) pb += s[rb].n;
  }
  double ea = case_err(a, la), eb = case_err(b, lb);
  print_message("two sequences in one batch: %s err %.3g, %s err %.3g\n", a->name, ea, b->name, eb);
  if (ea > TOL || eb > TOL) fail_msg("batched sequences: errors %.3g / %.3g > %.0e", ea, eb, TOL);
  free(la);
  free(lb);
  free(tmp);
}

/* Snapshot the state after the prompt, decode, restore, decode again: same logits. */
static void test_state_snapshot(void **state) {
  (void)state;
  const gcase_t *c = &F.cases[F.n_cases > 1 ? 1 : 0];
  const int V = F.m->hp.n_vocab, n_gen = 6;
  be_t *be = F.be;
  assert_true(c->n_prompt + n_gen <= c->n_all);
  float *l1 = malloc(sizeof(float) * (size_t)n_gen * V), *l2 = malloc(sizeof(float) * (size_t)n_gen * V);
  seqstep_t s = {0, c->all, 0, c->n_prompt, OUT_NONE};
  run_step(&s, 1, NULL);
  assert_int_equal(be->ops->state_copy(be, 3, 0), GT_OK); /* snapshot slot 0 into slot 3 */
  for (int j = 0; j < n_gen; j++) {
    seqstep_t d = {0, c->all, c->n_prompt + j, 1, OUT_LAST};
    run_step(&d, 1, l1 + (size_t)j * V);
  }
  assert_int_equal(be->ops->state_copy(be, 0, 3), GT_OK); /* restore */
  for (int j = 0; j < n_gen; j++) {
    seqstep_t d = {0, c->all, c->n_prompt + j, 1, OUT_LAST};
    run_step(&d, 1, l2 + (size_t)j * V);
  }
  assert_memory_equal(l1, l2, sizeof(float) * (size_t)n_gen * V);
  /* without the restore the recurrent state has moved on: the logits differ */
  seqstep_t d = {0, c->all, c->n_prompt, 1, OUT_LAST};
  run_step(&d, 1, l2);
  assert_true(memcmp(l1, l2, sizeof(float) * V) != 0);
  /* and the continuation matches the teacher-forced reference */
  for (int j = 0; j < n_gen; j++) {
    int row = c->n_prompt + j - c->first_row;
    if (row < 0) continue;
    double e = tu_max_row_rel_err(l1 + (size_t)j * V, c->ref + (size_t)row * V, 1, V);
    if (e > TOL) fail_msg("restored decode row %d: err %.3g", row, e);
  }
  free(l1);
  free(l2);
}

/* ---- loader: variants of the tiny file ---- */
typedef struct {
  char name[96];
  uint32_t n_dims;
  int64_t ne[4];
  gt_type_t type;
  const void *data; /* NULL: zeros */
  size_t nbytes;
} vt_t;

/* Writes the tiny model's arch metadata and tensors to path, plus n_mtp MTP blocks (blk.<n_layer+i>,
 * a copy of attention layer 3 and zero nextn tensors), leaving out tensor `drop` and setting the
 * integer key `ovr_key` (if any) to ovr_val. Returns the MTP bytes added. */
static size_t write_variant(const char *path, int n_mtp, const char *drop, const char *ovr_key, int64_t ovr_val) {
  gt_err_t err = {0};
  gw_t *w = NULL;
  if (gw_create(path, &w, &err)) fail_msg("gw_create: %s", err.msg);
  const gguf_t *g = F.g;
  const char *arch = gguf_arch(g);
  if (gw_kv_str(w, "general.architecture", arch, strlen(arch), &err)) fail_msg("%s", err.msg);
  for (int64_t i = 0; i < gguf_n_kv(g); i++) {
    const char *key = gguf_key(g, i);
    if (strncmp(key, "qwen35.", 7) != 0) continue;
    gguf_vtype_t t = gguf_kv_type(g, i);
    int rc;
    if (ovr_key && strcmp(key, ovr_key) == 0) {
      rc = gw_kv_u32(w, key, (uint32_t)ovr_val, &err);
    } else if (t == GGUF_VT_FLOAT32 || t == GGUF_VT_FLOAT64) {
      double v;
      assert_int_equal(gguf_get_float(g, key, &v), GT_OK);
      rc = gw_kv_f32(w, key, (float)v, &err);
    } else if (t != GGUF_VT_STRING && t != GGUF_VT_ARRAY) {
      int64_t v;
      assert_int_equal(gguf_get_int(g, key, &v), GT_OK);
      rc = gw_kv_u32(w, key, (uint32_t)v, &err);
    } else {
      continue;
    }
    if (rc) fail_msg("%s", err.msg);
  }
  if (n_mtp && gw_kv_u32(w, "qwen35.nextn_predict_layers", (uint32_t)n_mtp, &err)) fail_msg("%s", err.msg);
  const int64_t nt = gguf_n_tensors(g);
  vt_t *ts = calloc((size_t)nt + 32 * (size_t)n_mtp, sizeof *ts);
  int n = 0;
  for (int64_t i = 0; i < nt; i++) {
    const gguf_tensor_t *t = gguf_tensor(g, i);
    ts[n] = (vt_t){.n_dims = t->n_dims, .type = t->type, .data = t->data, .nbytes = t->nbytes};
    snprintf(ts[n].name, sizeof ts[n].name, "%s", t->name);
    memcpy(ts[n].ne, t->ne, sizeof ts[n].ne);
    n++;
  }
  static const char *copied[] = {"attn_norm", "post_attention_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                 "attn_q_norm", "attn_k_norm", "ffn_gate", "ffn_up", "ffn_down"};
  static const char *nextn[] = {"eh_proj", "enorm", "hnorm", "shared_head_norm"};
  const int64_t d = F.m->hp.n_embd;
  size_t added = 0;
  for (int b = 0; b < n_mtp; b++) {
    const int blk = F.m->hp.n_layer + b;
    for (size_t j = 0; j < sizeof copied / sizeof copied[0]; j++) {
      char src[96];
      snprintf(src, sizeof src, "blk.3.%s.weight", copied[j]);
      const gguf_tensor_t *t = gguf_find_tensor(g, src);
      assert_non_null(t);
      ts[n] = (vt_t){.n_dims = t->n_dims, .type = t->type, .data = t->data, .nbytes = t->nbytes};
      snprintf(ts[n].name, sizeof ts[n].name, "blk.%d.%s.weight", blk, copied[j]);
      memcpy(ts[n].ne, t->ne, sizeof ts[n].ne);
      n++;
    }
    for (size_t j = 0; j < sizeof nextn / sizeof nextn[0]; j++) {
      const int eh = j == 0;
      ts[n] = (vt_t){.n_dims = eh ? 2 : 1, .ne = {eh ? 2 * d : d, eh ? d : 1, 1, 1}, .type = GT_TYPE_F32,
                     .nbytes = sizeof(float) * (size_t)(eh ? 2 * d * d : d)};
      snprintf(ts[n].name, sizeof ts[n].name, "blk.%d.nextn.%s.weight", blk, nextn[j]);
      n++;
    }
  }
  size_t max_zero = 0;
  for (int i = 0; i < n; i++) {
    if (drop && strcmp(ts[i].name, drop) == 0) continue;
    if (i >= nt) added += ts[i].nbytes;
    if (!ts[i].data && ts[i].nbytes > max_zero) max_zero = ts[i].nbytes;
    if (gw_tensor(w, ts[i].name, ts[i].n_dims, ts[i].ne, ts[i].type, &err)) fail_msg("%s", err.msg);
  }
  void *zeros = calloc(1, max_zero + 1);
  if (gw_begin_data(w, &err)) fail_msg("%s", err.msg);
  for (int i = 0; i < n; i++) {
    if (drop && strcmp(ts[i].name, drop) == 0) continue;
    if (gw_write(w, ts[i].data ? ts[i].data : zeros, ts[i].nbytes, &err)) fail_msg("%s", err.msg);
  }
  if (gw_finish(w, &err)) fail_msg("gw_finish: %s", err.msg);
  free(zeros);
  free(ts);
  return added;
}

/* Loads path on a fresh CPU backend; returns the status (message in err). */
static int load_variant(const char *path, be_t **be, gguf_t **g, model_t **m, gt_err_t *err) {
  *be = NULL;
  *g = NULL;
  *m = NULL;
  int rc = gguf_open(path, g, err);
  if (!rc) rc = be_cpu_create(N_THREADS, be, err);
  if (!rc) rc = model_load(*g, *be, 64, m, err);
  return rc;
}
static void unload_variant(be_t *be, gguf_t *g, model_t *m) {
  model_free(m);
  be_destroy(be);
  gguf_close(g);
}

static void test_loader_variants(void **state) {
  (void)state;
  char path[] = "/tmp/gantry_qwen35_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  gt_err_t err = {0};
  be_t *be;
  gguf_t *g;
  model_t *m;

  /* one MTP block: loaded and counted, logits unchanged */
  size_t added = write_variant(path, 1, NULL, NULL, 0);
  if (load_variant(path, &be, &g, &m, &err)) fail_msg("MTP variant: %s", err.msg);
  assert_int_equal(m->hp.n_nextn, 1);
  assert_int_equal(m->weight_bytes, F.m->weight_bytes + added);
  assert_int_equal(m->hp.n_attn_layers, 1);
  if (model_cache_init(m, 8, BLOCK_TOKENS, 1, &err)) fail_msg("%s", err.msg);
  const gcase_t *c = &F.cases[0];
  const int V = F.m->hp.n_vocab, n = c->n_all < 32 ? c->n_all : 32;
  float *a = malloc(sizeof(float) * (size_t)n * V);
  {
    int32_t pos[64], first = 0, nt = n, slot = 0, bt[8], out[64];
    for (int i = 0; i < n; i++) pos[i] = out[i] = i;
    for (int i = 0; i < 8; i++) bt[i] = i;
    be_batch_t b = {.n_tok = n, .n_seq = 1, .tok = c->all, .pos = pos, .seq_first = &first, .seq_ntok = &nt,
                    .block_table = bt, .max_blocks = 8, .state_slot = &slot, .n_out = n, .out_tok = out};
    if (model_forward(m, &b, a, &err)) fail_msg("MTP variant forward: %s", err.msg);
  }
  assert_memory_equal(a, teacher_forced(0), sizeof(float) * (size_t)n * V);
  free(a);
  unload_variant(be, g, m);

  /* refused variants, each with a message naming the problem */
  static const struct {
    const char *drop, *key;
    int64_t val;
    int code;
    const char *msg;
  } bad[] = {
      {"blk.4.nextn.hnorm.weight", NULL, 0, GT_EFORMAT, "blk.4.nextn.hnorm"},
      {"blk.1.ssm_conv1d.weight", NULL, 0, GT_EFORMAT, "blk.1.ssm_conv1d"},
      {NULL, "qwen35.ssm.group_count", 3, GT_EFORMAT, "group_count"},
      {NULL, "qwen35.ssm.inner_size", 250, GT_EFORMAT, "inner_size"},
      {NULL, "qwen35.ssm.conv_kernel", 64, GT_EUNSUPPORTED, "conv_kernel"},
      {NULL, "qwen35.full_attention_interval", 2, GT_EFORMAT, "blk.1.attn_q"},
      {NULL, "qwen35.full_attention_interval", 0, GT_EFORMAT, "full_attention_interval"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    write_variant(path, bad[i].drop && strstr(bad[i].drop, "nextn") ? 1 : 0, bad[i].drop, bad[i].key, bad[i].val);
    memset(&err, 0, sizeof err);
    int rc = load_variant(path, &be, &g, &m, &err);
    if (rc != bad[i].code || !strstr(err.msg, bad[i].msg))
      fail_msg("variant %zu: got %s '%s', expected %s naming '%s'", i, gt_err_name(rc), err.msg,
               gt_err_name(bad[i].code), bad[i].msg);
    unload_variant(be, g, m);
  }
  unlink(path);
}

static void test_missing_state_slot(void **state) {
  (void)state;
  int32_t tok[1] = {5}, pos[1] = {0}, first[1] = {0}, ntok[1] = {1}, bt[MAX_BLOCKS] = {0};
  be_batch_t b = {.n_tok = 1, .n_seq = 1, .tok = tok, .pos = pos, .seq_first = first, .seq_ntok = ntok,
                  .block_table = bt, .max_blocks = MAX_BLOCKS, .state_slot = NULL, .n_out = 0, .out_tok = NULL};
  gt_err_t err = {0};
  assert_int_equal(model_forward(F.m, &b, NULL, &err), GT_EINVAL);
  assert_non_null(strstr(err.msg, "state slot"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hparams),
      cmocka_unit_test(test_teacher_forced),
      cmocka_unit_test(test_greedy),
      cmocka_unit_test(test_chunked_prefill),
      cmocka_unit_test(test_two_sequences),
      cmocka_unit_test(test_state_snapshot),
      cmocka_unit_test(test_missing_state_slot),
      cmocka_unit_test(test_loader_variants),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
