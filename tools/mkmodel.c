/* tools/mkmodel.c — presets, tensor tables, metadata and streaming weight generation for
 * synthetic Qwen3 / Qwen3.5 GGUF files (see mkmodel.h). Tokenizer: mkmodel_vocab.c. */
#include "tools/mkmodel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "format/gguf_write.h"
#include "tools/mkmodel_internal.h"
#include "tools/quantize.h"

/* ---------------------------------------------------------------- presets */

static const mk_preset_t k_presets[] = {
    /* Qwen3-8B (config.json of Qwen/Qwen3-8B) */
    {.name = "qwen3-8b", .arch = "qwen3", .label = "Gantry Synthetic Qwen3 8B", .size_label = "8.2B",
     .n_layer = 36, .n_embd = 4096, .n_head = 32, .n_head_kv = 8, .head_dim = 128, .n_ff = 12288,
     .n_vocab = 151936, .ctx_len = 40960, .rope_theta = 1000000.0f, .rms_eps = 1e-6f},
    /* Qwen3.5-9B: 24 Gated DeltaNet + 8 gated-attention layers, one MTP layer */
    {.name = "qwen35-9b", .arch = "qwen35", .label = "Gantry Synthetic Qwen3.5 9B", .size_label = "9B",
     .n_layer = 32, .n_embd = 4096, .n_head = 16, .n_head_kv = 4, .head_dim = 256, .n_ff = 12288,
     .n_vocab = 248320, .ctx_len = 262144, .rope_theta = 10000000.0f, .rms_eps = 1e-6f,
     .rope_dim = 64, .full_attn_interval = 4, .ssm_conv = 4, .ssm_k_heads = 16, .ssm_v_heads = 32,
     .ssm_head_dim = 128, .n_nextn = 1},
    /* Qwen3.5-27B */
    {.name = "qwen35-27b", .arch = "qwen35", .label = "Gantry Synthetic Qwen3.5 27B", .size_label = "27B",
     .n_layer = 64, .n_embd = 5120, .n_head = 24, .n_head_kv = 4, .head_dim = 256, .n_ff = 17408,
     .n_vocab = 248320, .ctx_len = 262144, .rope_theta = 10000000.0f, .rms_eps = 1e-6f,
     .rope_dim = 64, .full_attn_interval = 4, .ssm_conv = 4, .ssm_k_heads = 16, .ssm_v_heads = 48,
     .ssm_head_dim = 128, .n_nextn = 1},
    /* the shapes of tests/golden/qwen3-tiny.bf16.gguf */
    {.name = "qwen3-tiny", .arch = "qwen3", .label = "Gantry Synthetic Qwen3 Tiny", .size_label = "2.9M",
     .n_layer = 4, .n_embd = 256, .n_head = 4, .n_head_kv = 2, .head_dim = 64, .n_ff = 512,
     .n_vocab = 1024, .ctx_len = 32768, .rope_theta = 1000000.0f, .rms_eps = 1e-6f},
    /* the shapes of tests/golden/qwen35-tiny.bf16.gguf */
    {.name = "qwen35-tiny", .arch = "qwen35", .label = "Gantry Synthetic Qwen3.5 Tiny", .size_label = "3.2M",
     .n_layer = 4, .n_embd = 256, .n_head = 4, .n_head_kv = 2, .head_dim = 64, .n_ff = 512,
     .n_vocab = 1024, .ctx_len = 32768, .rope_theta = 10000.0f, .rms_eps = 1e-6f, .rope_dim = 16,
     .full_attn_interval = 4, .ssm_conv = 4, .ssm_k_heads = 2, .ssm_v_heads = 4, .ssm_head_dim = 64,
     .n_nextn = 1}, /* the golden file has none; --mtp adds one (the drafter's tests) */
};
#define N_PRESETS ((int)(sizeof k_presets / sizeof k_presets[0]))

const mk_preset_t *mk_preset(const char *name) {
  for (int i = 0; name && i < N_PRESETS; i++)
    if (strcmp(k_presets[i].name, name) == 0) return &k_presets[i];
  return NULL;
}

const char *mk_preset_name(int i) { return i >= 0 && i < N_PRESETS ? k_presets[i].name : NULL; }

/* ---------------------------------------------------------------- tensor table */

typedef struct {
  mk_tensor_t *t;
  int64_t n, cap;
  int oom;
} tlist_t;

static void add(tlist_t *l, int layer, int mtp, const char *suffix, mk_init_t init, float std,
                gt_type_t st, int64_t ne0, int64_t ne1) {
  if (l->oom) return;
  if (l->n == l->cap) {
    int64_t cap = l->cap ? l->cap * 2 : 256;
    mk_tensor_t *t = realloc(l->t, (size_t)cap * sizeof *t);
    if (!t) {
      l->oom = 1;
      return;
    }
    l->t = t;
    l->cap = cap;
  }
  mk_tensor_t *t = &l->t[l->n++];
  memset(t, 0, sizeof *t);
  if (layer >= 0) snprintf(t->name, sizeof t->name, "blk.%d.%s", layer, suffix);
  else snprintf(t->name, sizeof t->name, "%s", suffix);
  t->n_dims = ne1 > 0 ? 2 : 1;
  t->ne[0] = ne0;
  t->ne[1] = ne1 > 0 ? ne1 : 1;
  t->ne[2] = t->ne[3] = 1;
  t->src_type = st;
  t->init = init;
  t->std = std;
  t->layer = layer;
  t->mtp = mtp;
}

#define W_STD 0.02f
#define NORM_STD 0.02f

/* Attention block tensors of one layer (qwen3 or qwen35 order, as llama.cpp's converter
 * writes them). qwen35 attn_q holds the query and its output gate: 2 * n_head * head_dim. */
static void add_attn(tlist_t *l, const mk_preset_t *p, int il, int mtp, int qwen35) {
  const int64_t E = p->n_embd, hd = p->head_dim, F = p->n_ff;
  const int64_t q = (int64_t)p->n_head * hd, kv = (int64_t)p->n_head_kv * hd;
  add(l, il, mtp, "attn_norm.weight", MK_INIT_NORM, NORM_STD, GT_TYPE_F32, E, 0);
  add(l, il, mtp, "ffn_down.weight", MK_INIT_NORMAL, W_STD, GT_TYPE_BF16, F, E);
  add(l, il, mtp, "ffn_gate.weight", MK_INIT_NORMAL, W_STD, GT_TYPE_BF16, E, F);
  add(l, il, mtp, "ffn_up.weight", MK_INIT_NORMAL, W_STD, GT_TYPE_BF16, E, F);
  add(l, il, mtp, qwen35 ? "post_attention_norm.weight" : "ffn_norm.weight", MK_INIT_NORM, NORM_STD,
      GT_TYPE_F32, E, 0);
  add(l, il, mtp, "attn_k_norm.weight", MK_INIT_NORM, NORM_STD, GT_TYPE_F32, hd, 0);
  add(l, il, mtp, "attn_k.weight", MK_INIT_NORMAL, W_STD, GT_TYPE_BF16, E, kv);
  add(l, il, mtp, "attn_output.weight", MK_INIT_NORMAL, W_STD, GT_TYPE_BF16, q, E);
  add(l, il, mtp, "attn_q_norm.weight", MK_INIT_NORM, NORM_STD, GT_TYPE_F32, hd, 0);
  add(l, il, mtp, "attn_q.weight", MK_INIT_NORMAL, W_STD, GT_TYPE_BF16, E, qwen35 ? 2 * q : q);
  add(l, il, mtp, "attn_v.weight", MK_INIT_NORMAL, W_STD, GT_TYPE_BF16, E, kv);
}

/* Gated DeltaNet layer (llama.cpp qwen35 names). conv channels = q + k + v projections. */
static void add_gdn(tlist_t *l, const mk_preset_t *p, int il) {
  const int64_t E = p->n_embd, F = p->n_ff, hv = p->ssm_v_heads, d = p->ssm_head_dim;
  const int64_t vdim = hv * d, conv_ch = 2 * (int64_t)p->ssm_k_heads * d + vdim;
  add(l, il, 0, "attn_norm.weight", MK_INIT_NORM, NORM_STD, GT_TYPE_F32, E, 0);
  add(l, il, 0, "ssm_a", MK_INIT_SSM_A, 0, GT_TYPE_F32, hv, 0);
  add(l, il, 0, "ssm_conv1d.weight", MK_INIT_NORMAL, 0.2f, GT_TYPE_F32, p->ssm_conv, conv_ch);
  add(l, il, 0, "ssm_dt.bias", MK_INIT_DT_BIAS, 0, GT_TYPE_F32, hv, 0);
  add(l, il, 0, "ssm_alpha.weight", MK_INIT_NORMAL, W_STD, GT_TYPE_BF16, E, hv);
  add(l, il, 0, "ssm_beta.weight", MK_INIT_NORMAL, W_STD, GT_TYPE_BF16, E, hv);
  add(l, il, 0, "attn_qkv.weight", MK_INIT_NORMAL, W_STD, GT_TYPE_BF16, E, conv_ch);
  add(l, il, 0, "attn_gate.weight", MK_INIT_NORMAL, W_STD, GT_TYPE_BF16, E, vdim);
  add(l, il, 0, "ssm_norm.weight", MK_INIT_NORM, NORM_STD, GT_TYPE_F32, d, 0);
  add(l, il, 0, "ssm_out.weight", MK_INIT_NORMAL, W_STD, GT_TYPE_BF16, vdim, E);
  add(l, il, 0, "ffn_down.weight", MK_INIT_NORMAL, W_STD, GT_TYPE_BF16, F, E);
  add(l, il, 0, "ffn_gate.weight", MK_INIT_NORMAL, W_STD, GT_TYPE_BF16, E, F);
  add(l, il, 0, "ffn_up.weight", MK_INIT_NORMAL, W_STD, GT_TYPE_BF16, E, F);
  add(l, il, 0, "post_attention_norm.weight", MK_INIT_NORM, NORM_STD, GT_TYPE_F32, E, 0);
}

static void build_tensors(tlist_t *l, const mk_preset_t *p, int n_nextn) {
  const int qwen35 = strcmp(p->arch, "qwen35") == 0;
  const int64_t E = p->n_embd, V = p->n_vocab;
  if (!p->tied) add(l, -1, 0, "output.weight", MK_INIT_NORMAL, W_STD, GT_TYPE_BF16, E, V);
  add(l, -1, 0, "token_embd.weight", MK_INIT_NORMAL, W_STD, GT_TYPE_BF16, E, V);
  for (int il = 0; il < p->n_layer; il++) {
    if (qwen35 && (il + 1) % p->full_attn_interval != 0) add_gdn(l, p, il);
    else add_attn(l, p, il, 0, qwen35);
  }
  for (int k = 0; k < n_nextn; k++) {
    const int il = p->n_layer + k;
    add_attn(l, p, il, 1, qwen35);
    add(l, il, 1, "nextn.eh_proj.weight", MK_INIT_NORMAL, W_STD, GT_TYPE_BF16, 2 * E, E);
    add(l, il, 1, "nextn.enorm.weight", MK_INIT_NORM, NORM_STD, GT_TYPE_F32, E, 0);
    add(l, il, 1, "nextn.hnorm.weight", MK_INIT_NORM, NORM_STD, GT_TYPE_F32, E, 0);
    add(l, il, 1, "nextn.shared_head_norm.weight", MK_INIT_NORM, NORM_STD, GT_TYPE_F32, E, 0);
  }
  add(l, -1, 0, "output_norm.weight", MK_INIT_NORM, NORM_STD, GT_TYPE_F32, E, 0);
}

/* ---------------------------------------------------------------- metadata */

static int emit_meta(const mk_plan_t *pl, gw_t *w, gt_err_t *err) {
  const mk_preset_t *p = pl->p;
  const int qwen35 = strcmp(p->arch, "qwen35") == 0;
  char k[128];
  int rc;
  qz_mix_t mix;
  uint32_t ftype = 32;
  if (qz_mix_from_name(pl->type_name, &mix) == GT_OK) ftype = qz_mix_file_type(mix);
#define KEY(s) (snprintf(k, sizeof k, "%s." s, p->arch), k)
#define TRY(x) do { if ((rc = (x))) return rc; } while (0)
  TRY(gw_kv_str(w, "general.architecture", p->arch, strlen(p->arch), err));
  TRY(gw_kv_str(w, "general.type", "model", 5, err));
  TRY(gw_kv_str(w, "general.name", p->label, strlen(p->label), err));
  TRY(gw_kv_str(w, "general.size_label", p->size_label, strlen(p->size_label), err));
  TRY(gw_kv_u32(w, KEY("block_count"), (uint32_t)(p->n_layer + pl->n_nextn), err));
  TRY(gw_kv_u32(w, KEY("context_length"), (uint32_t)p->ctx_len, err));
  TRY(gw_kv_u32(w, KEY("embedding_length"), (uint32_t)p->n_embd, err));
  TRY(gw_kv_u32(w, KEY("feed_forward_length"), (uint32_t)p->n_ff, err));
  TRY(gw_kv_u32(w, KEY("attention.head_count"), (uint32_t)p->n_head, err));
  TRY(gw_kv_u32(w, KEY("attention.head_count_kv"), (uint32_t)p->n_head_kv, err));
  TRY(gw_kv_f32(w, KEY("rope.freq_base"), p->rope_theta, err));
  TRY(gw_kv_f32(w, KEY("attention.layer_norm_rms_epsilon"), p->rms_eps, err));
  TRY(gw_kv_u32(w, KEY("attention.key_length"), (uint32_t)p->head_dim, err));
  TRY(gw_kv_u32(w, KEY("attention.value_length"), (uint32_t)p->head_dim, err));
  TRY(gw_kv_u32(w, "general.file_type", ftype, err));
  if (qwen35) {
    TRY(gw_kv_u32(w, KEY("ssm.conv_kernel"), (uint32_t)p->ssm_conv, err));
    TRY(gw_kv_u32(w, KEY("ssm.state_size"), (uint32_t)p->ssm_head_dim, err));
    TRY(gw_kv_u32(w, KEY("ssm.group_count"), (uint32_t)p->ssm_k_heads, err));
    TRY(gw_kv_u32(w, KEY("ssm.time_step_rank"), (uint32_t)p->ssm_v_heads, err));
    TRY(gw_kv_u32(w, KEY("ssm.inner_size"), (uint32_t)(p->ssm_v_heads * p->ssm_head_dim), err));
    TRY(gw_kv_u32(w, KEY("full_attention_interval"), (uint32_t)p->full_attn_interval, err));
    TRY(gw_kv_u32(w, KEY("rope.dimension_count"), (uint32_t)p->rope_dim, err));
    /* llama.cpp requires it for qwen35 (interleaved M-RoPE; for text, where every section
     * gets the token position, it is the plain partial RoPE gantry runs). Qwen3.5's
     * mrope_section [11, 11, 10] of its 32 rotary pairs, scaled to the preset's pairs. */
    const int pairs = p->rope_dim / 2, s01 = (pairs * 11 + 16) / 32;
    const int32_t sections[4] = {s01, s01, pairs - 2 * s01, 0};
    TRY(gw_kv_arr(w, KEY("rope.dimension_sections"), GGUF_VT_INT32, sections, 4, err));
    if (pl->n_nextn) TRY(gw_kv_u32(w, KEY("nextn_predict_layers"), (uint32_t)pl->n_nextn, err));
  }
  TRY(gw_kv_u32(w, "general.quantization_version", 2, err));
  TRY(mk_emit_tokenizer(w, p->n_vocab, qwen35 ? "qwen35" : "qwen2", err));
#undef KEY
#undef TRY
  return GT_OK;
}

/* Metadata + tensor infos into w (a layout-only or a real writer). */
static int emit_header(const mk_plan_t *pl, gw_t *w, gt_err_t *err) {
  int rc = emit_meta(pl, w, err);
  for (int64_t i = 0; !rc && i < pl->n; i++)
    rc = gw_tensor(w, pl->t[i].name, pl->t[i].n_dims, pl->t[i].ne, pl->t[i].type, err);
  return rc;
}

/* ---------------------------------------------------------------- plan */

static int parse_type(const char *s, qz_mix_t *mix) {
  if (!s) return GT_EINVAL;
  return qz_mix_from_name(s, mix);
}

void mk_plan_free(mk_plan_t *p) {
  if (!p) return;
  free(p->t);
  free(p);
}

int mk_plan_create(const char *preset, const char *type, int keep_output_bf16, int with_mtp, mk_plan_t **out,
                   gt_err_t *err) {
  return mk_plan_create_sized(preset, type, keep_output_bf16, with_mtp, 0, 0, out, err);
}

int mk_plan_create_sized(const char *preset, const char *type, int keep_output_bf16, int with_mtp, int n_layer,
                         int n_vocab, mk_plan_t **out, gt_err_t *err) {
  if (!out) return gt_err_set(err, GT_EINVAL, "mkmodel: NULL out");
  *out = NULL;
  const mk_preset_t *p0 = mk_preset(preset);
  if (!p0) return gt_err_set(err, GT_EINVAL, "unknown preset '%s'", preset ? preset : "(null)");
  if (n_layer < 0 || (n_layer > 0 && with_mtp && n_layer <= p0->n_nextn))
    return gt_err_set(err, GT_EINVAL, "mkmodel: %d layers for preset %s", n_layer, p0->name);
  if (n_vocab < 0 || (n_vocab > 0 && n_vocab < 512))
    return gt_err_set(err, GT_EINVAL, "mkmodel: vocabulary of %d (at least 512)", n_vocab);
  qz_mix_t mix;
  if (parse_type(type, &mix) != GT_OK)
    return gt_err_set(err, GT_EINVAL, "unknown type '%s' (bf16, f16, f32, Q8_0, Q4_K, Q5_K, Q6_K, Q4_K_M)",
                      type ? type : "(null)");
  if (keep_output_bf16 < 0) keep_output_bf16 = strcmp(p0->arch, "qwen35") == 0 && mix == QZ_MIX_Q4_K_M;
  mk_plan_t *pl = calloc(1, sizeof *pl);
  if (!pl) return gt_err_set(err, GT_ENOMEM, "mkmodel: out of memory");
  pl->shape = *p0;
  if (n_layer > 0) pl->shape.n_layer = n_layer;
  if (n_vocab > 0) pl->shape.n_vocab = n_vocab;
  const mk_preset_t *p = &pl->shape;
  pl->p = p;
  pl->n_nextn = with_mtp ? p->n_nextn : 0;
  snprintf(pl->type_name, sizeof pl->type_name, "%s", qz_mix_name(mix));
  tlist_t l = {0};
  build_tensors(&l, p, pl->n_nextn);
  pl->t = l.t;
  pl->n = l.n;
  if (l.oom) {
    mk_plan_free(pl);
    return gt_err_set(err, GT_ENOMEM, "mkmodel: out of memory");
  }
  qz_tensor_desc_t *d = calloc((size_t)pl->n, sizeof *d);
  gt_type_t *ty = calloc((size_t)pl->n, sizeof *ty);
  int rc = (!d || !ty) ? gt_err_set(err, GT_ENOMEM, "mkmodel: out of memory") : GT_OK;
  for (int64_t i = 0; !rc && i < pl->n; i++) {
    d[i] = (qz_tensor_desc_t){pl->t[i].name, pl->t[i].n_dims, {pl->t[i].ne[0], pl->t[i].ne[1], 1, 1},
                              pl->t[i].src_type};
  }
  if (!rc)
    rc = qz_plan_types(d, pl->n, p->n_layer + pl->n_nextn, mix, keep_output_bf16 ? QZ_KEEP_OUTPUT_BF16 : 0u,
                       ty, err);
  for (int64_t i = 0; !rc && i < pl->n; i++) pl->t[i].type = ty[i];
  free(d);
  free(ty);
  gw_t *w = NULL;
  if (!rc) rc = gw_create(NULL, &w, err);
  if (!rc) rc = emit_header(pl, w, err);
  if (!rc) {
    pl->header_bytes = gw_header_bytes(w);
    pl->data_bytes = gw_data_bytes(w);
    for (int64_t i = 0; i < pl->n; i++) {
      mk_tensor_t *t = &pl->t[i];
      t->offset = gw_tensor_offset(w, i);
      t->nbytes = gw_tensor_nbytes(w, i);
      if (t->mtp) pl->mtp_bytes += t->nbytes;
      else if (strcmp(t->name, "token_embd.weight") != 0) pl->bytes_per_token += t->nbytes;
    }
  }
  gw_free(w);
  if (rc) {
    mk_plan_free(pl);
    return rc;
  }
  *out = pl;
  return GT_OK;
}

/* ---------------------------------------------------------------- weights */

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static uint64_t hash_name(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

/* uniform in (0, 1) */
static float unif(uint64_t *s) { return ((float)(splitmix64(s) >> 40) + 0.5f) * (1.0f / 16777216.0f); }

/* Row r of tensor t: deterministic in (seed, name, r), independent of threads. x: (ne0). */
static void gen_row(const mk_tensor_t *t, uint64_t seed, int64_t r, float *x) {
  uint64_t s = seed ^ hash_name(t->name) ^ ((uint64_t)r * 0xD1B54A32D192ED03ull);
  splitmix64(&s);
  const int64_t n = t->ne[0];
  switch (t->init) {
    case MK_INIT_SSM_A: /* -exp(A_log), A_log = log(U(1, 16)) */
      for (int64_t i = 0; i < n; i++) x[i] = -(1.0f + 15.0f * unif(&s));
      return;
    case MK_INIT_DT_BIAS:
      for (int64_t i = 0; i < n; i++) x[i] = -1.0f + 2.0f * unif(&s);
      return;
    default:
      break;
  }
  const float base = t->init == MK_INIT_NORM ? 1.0f : 0.0f;
  for (int64_t i = 0; i < n; i += 2) { /* Box-Muller */
    float u1 = unif(&s), u2 = unif(&s);
    float rad = sqrtf(-2.0f * logf(u1)) * t->std;
    x[i] = base + rad * cosf(6.2831853f * u2);
    if (i + 1 < n) x[i + 1] = base + rad * sinf(6.2831853f * u2);
  }
}

typedef struct {
  const mk_tensor_t *t;
  uint64_t seed;
  int64_t r0, r1, row_base;
  uint8_t *dst;
  size_t dst_row;
  int rc;
} gen_job_t;

static void *gen_worker(void *arg) {
  gen_job_t *j = arg;
  float *x = malloc((size_t)j->t->ne[0] * sizeof *x);
  if (!x) {
    j->rc = GT_ENOMEM;
    return NULL;
  }
  for (int64_t r = j->r0; r < j->r1 && !j->rc; r++) {
    gen_row(j->t, j->seed, r, x);
    /* weights a converter would store as bf16 are rounded to bf16 first, so a quantized file
     * holds exactly what quantizing the bf16 file of the same seed gives */
    if (j->t->src_type == GT_TYPE_BF16)
      for (int64_t i = 0; i < j->t->ne[0]; i++) x[i] = dt_bf16_to_f32(dt_f32_to_bf16(x[i]));
    j->rc = qz_quantize_row(j->t->type, x, j->dst + (size_t)(r - j->row_base) * j->dst_row, j->t->ne[0]);
  }
  free(x);
  return NULL;
}

/* Rows [r0, r1) of t into dst, split over n_threads threads. */
static int gen_rows(const mk_tensor_t *t, uint64_t seed, int64_t r0, int64_t r1, uint8_t *dst,
                    size_t dst_row, int n_threads) {
  gen_job_t jobs[QZ_MAX_THREADS];
  int64_t rows = r1 - r0;
  if (n_threads > QZ_MAX_THREADS) n_threads = QZ_MAX_THREADS;
  if (n_threads > rows) n_threads = (int)rows;
  if (n_threads < 1) n_threads = 1;
  for (int i = 0; i < n_threads; i++)
    jobs[i] = (gen_job_t){t, seed, r0 + rows * i / n_threads, r0 + rows * (i + 1) / n_threads, r0, dst, dst_row, GT_OK};
  qz_run_jobs(gen_worker, jobs, sizeof jobs[0], n_threads);
  int rc = GT_OK;
  for (int i = 0; i < n_threads && !rc; i++) rc = jobs[i].rc;
  return rc;
}

int mk_write(const mk_plan_t *pl, const char *path, uint64_t seed, int n_threads, gt_err_t *err) {
  if (!pl || !path) return gt_err_set(err, GT_EINVAL, "mkmodel: NULL plan or path");
  if (n_threads < 1) n_threads = 1;
  gw_t *w = NULL;
  int rc = gw_create(path, &w, err);
  if (rc) return rc;
  if ((rc = emit_header(pl, w, err)) || (rc = gw_begin_data(w, err))) {
    gw_free(w);
    return rc;
  }
  uint8_t *buf = NULL;
  size_t cap = 0;
  for (int64_t i = 0; i < pl->n && !rc; i++) {
    const mk_tensor_t *t = &pl->t[i];
    const size_t row = dt_row_bytes(t->type, t->ne[0]);
    const int64_t nrows = t->ne[1] * t->ne[2] * t->ne[3];
    int64_t chunk = ((int64_t)4 << 20) / t->ne[0];
    if (chunk < 4 * (int64_t)n_threads) chunk = 4 * (int64_t)n_threads;
    if (chunk > nrows) chunk = nrows;
    if ((size_t)chunk * row > cap) {
      free(buf);
      cap = (size_t)chunk * row;
      buf = malloc(cap);
      if (!buf) {
        rc = gt_err_set(err, GT_ENOMEM, "mkmodel: out of memory");
        break;
      }
    }
    for (int64_t r = 0; r < nrows && !rc; r += chunk) {
      int64_t k = nrows - r < chunk ? nrows - r : chunk;
      rc = gen_rows(t, seed, r, r + k, buf, row, n_threads);
      if (rc) rc = gt_err_set(err, rc, "tensor %s: generating rows failed (%s)", t->name, gt_err_name(rc));
      else rc = gw_write(w, buf, (size_t)k * row, err);
    }
  }
  free(buf);
  if (rc) {
    gw_free(w);
    return rc;
  }
  return gw_finish(w, err);
}
