/* tools/quantize.c — row quantizers (ggml reference algorithms, own code), threaded row
 * conversion, llama.cpp's type mixes (qz_plan_types) and file quantization. */
#define _GNU_SOURCE /* qsort_r */
#include "tools/quantize.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "format/gguf.h"
#include "format/gguf_write.h"

#define QK_K 256
#define QK8_0 32
#define GROUP_MAX_EPS 1e-15f

/* Block layouts (see dtype.h); byte-exact with ggml's structs. */
typedef struct { uint16_t d; int8_t qs[QK8_0]; } blk_q8_0;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[QK_K / 2]; } blk_q4_k;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; } blk_q5_k;
typedef struct { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; } blk_q6_k;

_Static_assert(sizeof(blk_q8_0) == 34, "q8_0 block");
_Static_assert(sizeof(blk_q4_k) == 144, "q4_K block");
_Static_assert(sizeof(blk_q5_k) == 176, "q5_K block");
_Static_assert(sizeof(blk_q6_k) == 210, "q6_K block");

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

/* Round to nearest (ties to even) through the float mantissa, exactly as ggml does it:
 * adding 1.5 * 2^23 leaves the rounded integer in the low mantissa bits. |f| <= 2^22. */
static inline int round_int(float f) {
  float v = f + 12582912.f;
  int32_t bits;
  memcpy(&bits, &v, sizeof bits);
  return (bits & 0x007fffff) - 0x00400000;
}

/* ---------------------------------------------------------------- Q8_0 */

static void q8_0_row(const float *x, blk_q8_0 *y, int64_t n) {
  for (int64_t b = 0; b < n / QK8_0; b++, x += QK8_0) {
    float amax = 0.0f;
    for (int j = 0; j < QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = dt_f32_to_f16(d);
    for (int j = 0; j < QK8_0; j++) y[b].qs[j] = (int8_t)roundf(x[j] * id);
  }
}

/* ---------------------------------------------------------------- shared searches */

/* Asymmetric fit x ~ scale * L + min (min <= 0), L in [0, nmax], weighted least squares.
 * Starts from the min/max grid, then tries nstep+1 rescaled grids (rmin + rdelta * is) and
 * keeps the best weighted squared error. As in ggml, each grid is laid from the best min found
 * so far (not the data minimum), so an improvement shifts the later grids. Returns scale;
 * *neg_min = -min. L: (n) levels. */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L,
                           float *neg_min, uint8_t *Ltry, float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; i++) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    memset(L, 0, (size_t)n);
    *neg_min = -min;
    return 0.0f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best = 0;
  for (int i = 0; i < n; i++) {
    int l = round_int(iscale * (x[i] - min));
    L[i] = (uint8_t)imax(0, imin(nmax, l));
    float diff = scale * L[i] + min - x[i];
    best += w[i] * (diff * diff);
  }
  for (int is = 0; is <= nstep; is++) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sl = 0, sl2 = 0, sxl = 0;
    for (int i = 0; i < n; i++) {
      int l = round_int(iscale * (x[i] - min));
      l = imax(0, imin(nmax, l));
      Ltry[i] = (uint8_t)l;
      sl += w[i] * l;
      sl2 += w[i] * l * l;
      sxl += w[i] * l * x[i];
    }
    float D = sum_w * sl2 - sl * sl;
    if (D > 0) {
      float s = (sum_w * sxl - sum_x * sl) / D;
      float m = (sl2 * sum_x - sl * sxl) / D;
      if (m > 0) {
        m = 0;
        s = sxl / sl2;
      }
      float e = 0;
      for (int i = 0; i < n; i++) {
        float diff = s * Ltry[i] + m - x[i];
        e += w[i] * (diff * diff);
      }
      if (e < best) {
        memcpy(L, Ltry, (size_t)n);
        best = e;
        scale = s;
        min = m;
      }
    }
  }
  *neg_min = -min;
  return scale;
}

/* Symmetric fit x ~ scale * l, l in [-nmax, nmax-1], weights x^2 (ggml's rmse_type 1),
 * searching 18 rescaled grids around nmax. Levels stored as l + nmax. Returns scale. */
static float fit_scale_sym(int n, int nmax, const float *x, int8_t *L) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; i++) {
    float ax = fabsf(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < GROUP_MAX_EPS) {
    memset(L, 0, (size_t)n);
    return 0.0f;
  }
  float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; i++) {
    int l = round_int(iscale * x[i]);
    l = imax(-nmax, imin(nmax - 1, l));
    L[i] = (int8_t)(l + nmax);
    float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; is++) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; i++) {
      int l = round_int(iscale * x[i]);
      l = imax(-nmax, imin(nmax - 1, l));
      float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; i++) {
        int l = round_int(iscale * x[i]);
        L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

/* 6-bit scale j and min j of a Q4_K/Q5_K scales[12] array. */
static inline void k4_get(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

static inline void k4_put(int j, uint8_t *q, uint8_t ls, uint8_t lm) {
  if (j < 4) {
    q[j] = ls;
    q[j + 4] = lm;
  } else {
    q[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
    q[j - 4] |= (uint8_t)((ls >> 4) << 6);
    q[j] |= (uint8_t)((lm >> 4) << 6);
  }
}

/* Q4_K and Q5_K share everything but nmax and the search grid: 8 sub-blocks of 32 with an
 * asymmetric fit each, then 6-bit scales/mins against the block maxima, then final levels
 * from the rounded scales. L: (256) levels in [0, nmax]. Fills d, dmin, scales. */
static void k_scales_mins(const float *x, int nmax, float rmin, float rdelta, int nstep,
                          uint16_t *d_out, uint16_t *dmin_out, uint8_t *scales, uint8_t *L) {
  uint8_t Ltry[32];
  float w[32], sc[8], mn[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < QK_K / 32; j++) {
    const float *xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
    float av_x = sqrtf(sum_x2 / 32);
    for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(xs[l]);
    sc[j] = fit_scale_min(32, nmax, xs, w, L + 32 * j, &mn[j], Ltry, rmin, rdelta, nstep);
    if (sc[j] > max_scale) max_scale = sc[j];
    if (mn[j] > max_min) max_min = mn[j];
  }
  float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  memset(scales, 0, 12);
  for (int j = 0; j < QK_K / 32; j++) {
    uint8_t ls = (uint8_t)round_int(inv_scale * sc[j]);
    uint8_t lm = (uint8_t)round_int(inv_min * mn[j]);
    if (ls > 63) ls = 63;
    if (lm > 63) lm = 63;
    k4_put(j, scales, ls, lm);
  }
  *d_out = dt_f32_to_f16(max_scale / 63.f);
  *dmin_out = dt_f32_to_f16(max_min / 63.f);
  const float dd = dt_f16_to_f32(*d_out), dm0 = dt_f16_to_f32(*dmin_out);
  for (int j = 0; j < QK_K / 32; j++) {
    uint8_t s, m;
    k4_get(j, scales, &s, &m);
    const float d = dd * s;
    if (!d) continue;
    const float dm = dm0 * m;
    for (int i = 0; i < 32; i++) {
      int l = round_int((x[32 * j + i] + dm) / d);
      L[32 * j + i] = (uint8_t)imax(0, imin(nmax, l));
    }
  }
}

static void q4_k_row(const float *x, blk_q4_k *y, int64_t n) {
  uint8_t L[QK_K];
  for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
    k_scales_mins(x, 15, -1.f, 0.1f, 20, &y[b].d, &y[b].dmin, y[b].scales, L);
    uint8_t *q = y[b].qs;
    for (int j = 0; j < QK_K; j += 64, q += 32)
      for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
  }
}

static void q5_k_row(const float *x, blk_q5_k *y, int64_t n) {
  uint8_t L[QK_K];
  for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
    k_scales_mins(x, 31, -0.5f, 0.1f, 15, &y[b].d, &y[b].dmin, y[b].scales, L);
    uint8_t *qh = y[b].qh, *ql = y[b].qs;
    memset(qh, 0, QK_K / 8);
    uint8_t m1 = 1, m2 = 2;
    for (int j0 = 0; j0 < QK_K; j0 += 64, ql += 32) {
      for (int j = 0; j < 32; j++) {
        int l1 = L[j0 + j], l2 = L[j0 + j + 32];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] |= m1;
        }
        if (l2 > 15) {
          l2 -= 16;
          qh[j] |= m2;
        }
        ql[j] = (uint8_t)(l1 | (l2 << 4));
      }
      m1 = (uint8_t)(m1 << 2);
      m2 = (uint8_t)(m2 << 2);
    }
  }
}

static void q6_k_row(const float *x, blk_q6_k *y, int64_t n) {
  int8_t L[QK_K];
  float sc[QK_K / 16];
  for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
    float max_scale = 0, max_abs = 0;
    for (int ib = 0; ib < QK_K / 16; ib++) {
      sc[ib] = fit_scale_sym(16, 32, x + 16 * ib, L + 16 * ib);
      if (fabsf(sc[ib]) > max_abs) {
        max_abs = fabsf(sc[ib]);
        max_scale = sc[ib];
      }
    }
    if (max_abs < GROUP_MAX_EPS) {
      memset(&y[b], 0, sizeof y[b]);
      y[b].d = dt_f32_to_f16(0.f);
      continue;
    }
    float iscale = -128.f / max_scale;
    y[b].d = dt_f32_to_f16(1 / iscale);
    for (int ib = 0; ib < QK_K / 16; ib++) y[b].scales[ib] = (int8_t)imin(127, round_int(iscale * sc[ib]));
    const float dd = dt_f16_to_f32(y[b].d);
    for (int j = 0; j < QK_K / 16; j++) {
      float d = dd * y[b].scales[j];
      if (!d) continue;
      for (int i = 0; i < 16; i++) {
        int l = round_int(x[16 * j + i] / d);
        L[16 * j + i] = (int8_t)(imax(-32, imin(31, l)) + 32);
      }
    }
    uint8_t *ql = y[b].ql, *qh = y[b].qh;
    for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; l++) {
        const uint8_t a = (uint8_t)L[j + l], c = (uint8_t)L[j + l + 32];
        const uint8_t e = (uint8_t)L[j + l + 64], g = (uint8_t)L[j + l + 96];
        ql[l] = (uint8_t)((a & 0xF) | ((e & 0xF) << 4));
        ql[l + 32] = (uint8_t)((c & 0xF) | ((g & 0xF) << 4));
        qh[l] = (uint8_t)((a >> 4) | ((c >> 4) << 2) | ((e >> 4) << 4) | ((g >> 4) << 6));
      }
    }
  }
}

/* ---------------------------------------------------------------- public row API */

/* gantry quantizes to exactly the types it computes with */
int qz_can_quantize(gt_type_t t) { return dt_computable(t); }

int qz_quantize_row(gt_type_t t, const float *src, void *dst, int64_t n) {
  if (!qz_can_quantize(t)) return GT_EUNSUPPORTED;
  if (!src || !dst || n < 0 || n % dt_block_elems(t) != 0) return GT_EINVAL;
  switch (t) {
    case GT_TYPE_F32: memcpy(dst, src, (size_t)n * 4); break;
    case GT_TYPE_F16:
      for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = dt_f32_to_f16(src[i]);
      break;
    case GT_TYPE_BF16:
      for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = dt_f32_to_bf16(src[i]);
      break;
    case GT_TYPE_Q8_0: q8_0_row(src, dst, n); break;
    case GT_TYPE_Q4_K: q4_k_row(src, dst, n); break;
    case GT_TYPE_Q5_K: q5_k_row(src, dst, n); break;
    case GT_TYPE_Q6_K: q6_k_row(src, dst, n); break;
    default: return GT_EUNSUPPORTED;
  }
  return GT_OK;
}

int qz_row_to_f32(gt_type_t t, const void *src, float *dst, int64_t n) {
  if (!src || !dst) return GT_EINVAL;
  return dt_dequant_row(t, src, dst, n); /* F32 / F16 / BF16 included */
}

/* ---------------------------------------------------------------- threaded rows */

typedef struct {
  gt_type_t st, dt;
  const uint8_t *src;
  size_t src_row;
  uint8_t *dst;
  size_t dst_row;
  int64_t n, r0, r1;
  int rc;
} conv_job_t;

static void *conv_worker(void *arg) {
  conv_job_t *j = arg;
  float *tmp = malloc((size_t)j->n * sizeof(float));
  if (!tmp) {
    j->rc = GT_ENOMEM;
    return NULL;
  }
  for (int64_t r = j->r0; r < j->r1 && !j->rc; r++) {
    j->rc = qz_row_to_f32(j->st, j->src + (size_t)r * j->src_row, tmp, j->n);
    if (!j->rc) j->rc = qz_quantize_row(j->dt, tmp, j->dst + (size_t)r * j->dst_row, j->n);
  }
  free(tmp);
  return NULL;
}

void qz_run_jobs(void *(*fn)(void *), void *jobs, size_t job_size, int n) {
  pthread_t th[QZ_MAX_THREADS];
  int started[QZ_MAX_THREADS] = {0};
  char *j = jobs;
  for (int i = 1; i < n; i++) started[i] = pthread_create(&th[i], NULL, fn, j + (size_t)i * job_size) == 0;
  for (int i = 1; i < n; i++)
    if (!started[i]) fn(j + (size_t)i * job_size);
  fn(j);
  for (int i = 1; i < n; i++)
    if (started[i]) pthread_join(th[i], NULL);
}

int qz_convert_rows(gt_type_t st, const void *src, size_t src_row_bytes, gt_type_t dt,
                    void *dst, int64_t n, int64_t nrows, int n_threads, gt_err_t *err) {
  if (!src || !dst || n <= 0 || nrows < 0)
    return gt_err_set(err, GT_EINVAL, "convert rows: bad arguments");
  if (!qz_can_quantize(dt)) return gt_err_set(err, GT_EUNSUPPORTED, "cannot quantize to %s", dt_name(dt));
  size_t dst_row = dt_row_bytes(dt, n);
  if (!dst_row)
    return gt_err_set(err, GT_EINVAL, "row of %lld is not a multiple of %s's block", (long long)n, dt_name(dt));
  if (n_threads < 1) n_threads = 1;
  if (n_threads > QZ_MAX_THREADS) n_threads = QZ_MAX_THREADS;
  if (n_threads > nrows) n_threads = nrows > 0 ? (int)nrows : 1;
  conv_job_t jobs[QZ_MAX_THREADS];
  for (int i = 0; i < n_threads; i++) {
    jobs[i] = (conv_job_t){st, dt, src, src_row_bytes, dst, dst_row, n,
                           nrows * i / n_threads, nrows * (i + 1) / n_threads, GT_OK};
  }
  qz_run_jobs(conv_worker, jobs, sizeof jobs[0], n_threads);
  int rc = GT_OK;
  for (int i = 0; i < n_threads && !rc; i++) rc = jobs[i].rc;
  if (rc) return gt_err_set(err, rc, "converting rows %s -> %s failed (%s)", dt_name(st), dt_name(dt), gt_err_name(rc));
  return GT_OK;
}

/* ---------------------------------------------------------------- type mixes */

static const struct {
  const char *name;
  qz_mix_t mix;
  uint32_t ftype; /* llama_ftype */
} k_mixes[] = {
    {"Q8_0", QZ_MIX_Q8_0, 7},   {"Q4_K", QZ_MIX_Q4_K, 14}, {"Q5_K", QZ_MIX_Q5_K, 16},
    {"Q6_K", QZ_MIX_Q6_K, 18},  {"Q4_K_M", QZ_MIX_Q4_K_M, 15}, {"F16", QZ_MIX_F16, 1},
    {"BF16", QZ_MIX_BF16, 32},  {"F32", QZ_MIX_F32, 0},
};

int qz_mix_from_name(const char *s, qz_mix_t *out) {
  if (!s || !out) return GT_EINVAL;
  for (size_t i = 0; i < sizeof k_mixes / sizeof k_mixes[0]; i++) {
    if (strcasecmp(s, k_mixes[i].name) == 0) {
      *out = k_mixes[i].mix;
      return GT_OK;
    }
  }
  return GT_EINVAL;
}

const char *qz_mix_name(qz_mix_t m) {
  for (size_t i = 0; i < sizeof k_mixes / sizeof k_mixes[0]; i++)
    if (k_mixes[i].mix == m) return k_mixes[i].name;
  return "?";
}

uint32_t qz_mix_file_type(qz_mix_t m) {
  for (size_t i = 0; i < sizeof k_mixes / sizeof k_mixes[0]; i++)
    if (k_mixes[i].mix == m) return k_mixes[i].ftype;
  return 0;
}

static gt_type_t mix_default_type(qz_mix_t m) {
  switch (m) {
    case QZ_MIX_Q8_0: return GT_TYPE_Q8_0;
    case QZ_MIX_Q4_K: case QZ_MIX_Q4_K_M: return GT_TYPE_Q4_K;
    case QZ_MIX_Q5_K: return GT_TYPE_Q5_K;
    case QZ_MIX_Q6_K: return GT_TYPE_Q6_K;
    case QZ_MIX_F16: return GT_TYPE_F16;
    case QZ_MIX_BF16: return GT_TYPE_BF16;
    default: return GT_TYPE_F32;
  }
}

static int ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && memcmp(s + a - b, suf, b) == 0;
}

/* llama.cpp's tensor_allows_quantization for the names qwen3/qwen35 use (plus the generic
 * exclusions that can appear in other decoder GGUFs). */
static int allows_quant(const qz_tensor_desc_t *t) {
  int nd = 0;
  for (int d = 0; d < 4; d++)
    if (t->ne[d] > 1) nd = d + 1;
  if (nd < 2) return 0;
  const char *n = t->name;
  if (!ends_with(n, "weight")) return 0;
  static const char *const k_skip[] = {"_norm.weight", "ffn_gate_inp.weight", "altup", "laurel",
                                       "per_layer_model_proj", "ssm_conv1d",
                                       "shortconv.conv.weight", "time_mix_", "attn_rel_b.weight",
                                       ".position_embd", ".patch_embd"};
  for (size_t i = 0; i < sizeof k_skip / sizeof k_skip[0]; i++)
    if (strstr(n, k_skip[i])) return 0;
  if (strcmp(n, "position_embd.weight") == 0 || strcmp(n, "token_types.weight") == 0) return 0;
  return 1;
}

typedef enum { CAT_TOKEN_EMBD, CAT_ATTN_V, CAT_FFN_DOWN, CAT_OUTPUT, CAT_OTHER } cat_t;

static cat_t category(const char *n) {
  if (strcmp(n, "output.weight") == 0) return CAT_OUTPUT;
  if (strcmp(n, "token_embd.weight") == 0 || strcmp(n, "per_layer_token_embd.weight") == 0) return CAT_TOKEN_EMBD;
  /* attn_qkv and attn_kv_b count as attn_v-like (llama.cpp's category_is_attn_v) */
  if (strstr(n, "attn_qkv.weight") || strstr(n, "attn_kv_b.weight") || strstr(n, "attn_v.weight"))
    return CAT_ATTN_V;
  if (strstr(n, "attn_k.weight") || strstr(n, "attn_q.weight") || strstr(n, "attn_output.weight") ||
      strstr(n, "ffn_up") || strstr(n, "ffn_gate"))
    return CAT_OTHER;
  if (strstr(n, "ffn_down")) return CAT_FFN_DOWN;
  return CAT_OTHER;
}

static int use_more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static int layer_of(const char *name) {
  int l = -1;
  if (sscanf(name, "blk.%d.", &l) != 1) return -1;
  return l;
}

/* llama.cpp's weight_name_comparer: by layer (non-layer tensors first), then by name. */
static int cmp_llama_order(const void *a, const void *b, void *ctx) {
  const qz_tensor_desc_t *t = ctx;
  const qz_tensor_desc_t *x = &t[*(const int64_t *)a], *y = &t[*(const int64_t *)b];
  int lx = layer_of(x->name), ly = layer_of(y->name);
  if (lx != ly) return lx < ly ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* order[0..n) = indices of t in llama.cpp's order. */
static void llama_order(const qz_tensor_desc_t *t, int64_t n, int64_t *order) {
  for (int64_t i = 0; i < n; i++) order[i] = i;
  qsort_r(order, (size_t)n, sizeof *order, cmp_llama_order, (void *)t);
}

/* Shape fallback for k-quants (see quantize.h). */
static gt_type_t shape_fallback(const qz_tensor_desc_t *t, gt_type_t want) {
  if (t->ne[0] % dt_block_elems(want) == 0) return want;
  if (t->ne[0] % 32 == 0 && (want == GT_TYPE_Q4_K || want == GT_TYPE_Q5_K || want == GT_TYPE_Q6_K))
    return GT_TYPE_Q8_0;
  return t->type;
}

int qz_plan_types(const qz_tensor_desc_t *t, int64_t n, int64_t n_layer_all, qz_mix_t mix,
                  unsigned flags, gt_type_t *out, gt_err_t *err) {
  if ((!t || !out) && n) return gt_err_set(err, GT_EINVAL, "plan: NULL tensors");
  if ((int)mix < 0 || mix >= QZ_MIX_COUNT) return gt_err_set(err, GT_EINVAL, "plan: bad mix %d", (int)mix);
  int64_t *order = malloc((size_t)(n ? n : 1) * sizeof *order);
  if (!order) return gt_err_set(err, GT_ENOMEM, "plan: out of memory");
  llama_order(t, n, order);
  const gt_type_t def = mix_default_type(mix);
  const int quantized = def != GT_TYPE_F32 && def != GT_TYPE_F16 && def != GT_TYPE_BF16;
  int64_t n_attn_v = 0, i_attn_v = 0, i_ffn_down = 0;
  int tied = 1;
  for (int64_t i = 0; i < n; i++) {
    cat_t c = category(t[i].name);
    if (c == CAT_ATTN_V) n_attn_v++;
    if (c == CAT_OUTPUT) tied = 0;
  }
  for (int64_t k = 0; k < n; k++) {
    const qz_tensor_desc_t *ti = &t[order[k]];
    gt_type_t ty = ti->type;
    if (allows_quant(ti)) {
      cat_t c = category(ti->name);
      ty = def;
      if (c == CAT_OUTPUT || (tied && c == CAT_TOKEN_EMBD)) {
        if (flags & QZ_KEEP_OUTPUT_BF16) {
          ty = GT_TYPE_BF16;
        } else if (quantized) {
          if (ti->ne[0] % dt_block_elems(def) != 0) ty = GT_TYPE_Q8_0;
          else if (def != GT_TYPE_Q8_0) ty = GT_TYPE_Q6_K;
        }
      } else if (c == CAT_ATTN_V) {
        if (mix == QZ_MIX_Q4_K_M && use_more_bits(i_attn_v, n_attn_v)) ty = GT_TYPE_Q6_K;
        i_attn_v++;
      } else if (c == CAT_FFN_DOWN) {
        if (mix == QZ_MIX_Q4_K_M && use_more_bits(i_ffn_down, n_layer_all)) ty = GT_TYPE_Q6_K;
        i_ffn_down++;
      }
      if (quantized && ty != GT_TYPE_BF16) ty = shape_fallback(ti, ty);
    }
    out[order[k]] = ty;
  }
  free(order);
  return GT_OK;
}

/* ---------------------------------------------------------------- files */


/* Copies metadata key i of g into w. */
static int copy_kv(const gguf_t *g, int64_t i, gw_t *w, gt_err_t *err) {
  const char *key = gguf_key(g, i);
  gguf_vtype_t vt = gguf_kv_type(g, i);
  int64_t iv = 0;
  double fv = 0;
  int bv = 0, rc;
  switch (vt) {
    case GGUF_VT_UINT8: case GGUF_VT_INT8: case GGUF_VT_UINT16: case GGUF_VT_INT16:
    case GGUF_VT_UINT32: case GGUF_VT_INT32: case GGUF_VT_UINT64: case GGUF_VT_INT64:
      if ((rc = gguf_get_int(g, key, &iv))) return gt_err_set(err, rc, "metadata %s: unreadable integer", key);
      switch (vt) {
        case GGUF_VT_UINT8: return gw_kv_u8(w, key, (uint8_t)iv, err);
        case GGUF_VT_INT8: return gw_kv_i8(w, key, (int8_t)iv, err);
        case GGUF_VT_UINT16: return gw_kv_u16(w, key, (uint16_t)iv, err);
        case GGUF_VT_INT16: return gw_kv_i16(w, key, (int16_t)iv, err);
        case GGUF_VT_UINT32: return gw_kv_u32(w, key, (uint32_t)iv, err);
        case GGUF_VT_INT32: return gw_kv_i32(w, key, (int32_t)iv, err);
        case GGUF_VT_UINT64: return gw_kv_u64(w, key, (uint64_t)iv, err);
        default: return gw_kv_i64(w, key, iv, err);
      }
    case GGUF_VT_FLOAT32: case GGUF_VT_FLOAT64:
      if ((rc = gguf_get_float(g, key, &fv))) return gt_err_set(err, rc, "metadata %s: unreadable float", key);
      return vt == GGUF_VT_FLOAT32 ? gw_kv_f32(w, key, (float)fv, err) : gw_kv_f64(w, key, fv, err);
    case GGUF_VT_BOOL:
      if ((rc = gguf_get_bool(g, key, &bv))) return gt_err_set(err, rc, "metadata %s: unreadable bool", key);
      return gw_kv_bool(w, key, bv, err);
    case GGUF_VT_STRING: {
      const char *s;
      size_t len;
      if ((rc = gguf_get_str(g, key, &s, &len))) return gt_err_set(err, rc, "metadata %s: unreadable string", key);
      return gw_kv_str(w, key, s, len, err);
    }
    case GGUF_VT_ARRAY: {
      gguf_vtype_t et;
      uint64_t n;
      if ((rc = gguf_get_arr(g, key, &et, &n))) return gt_err_set(err, rc, "metadata %s: unreadable array", key);
      if (et == GGUF_VT_STRING) {
        if ((rc = gw_kv_arr_str_begin(w, key, n, err))) return rc;
        for (uint64_t k = 0; k < n; k++) {
          const char *s;
          size_t len;
          if ((rc = gguf_arr_str(g, key, k, &s, &len))) return gt_err_set(err, rc, "metadata %s[%llu]: unreadable", key, (unsigned long long)k);
          if ((rc = gw_kv_arr_str_add(w, s, len, err))) return rc;
        }
        return GT_OK;
      }
      if (et == GGUF_VT_ARRAY) return gt_err_set(err, GT_EUNSUPPORTED, "metadata %s: nested arrays are not supported", key);
      const void *data = gguf_arr_data(g, key);
      if (!data && n) return gt_err_set(err, GT_EFORMAT, "metadata %s: no array data", key);
      return gw_kv_arr(w, key, et, data, n, err);
    }
    default:
      return gt_err_set(err, GT_EFORMAT, "metadata %s: unknown value type %d", key, (int)vt);
  }
}

static int skip_key(const char *k) {
  return strcmp(k, "general.quantization_version") == 0 || strcmp(k, "general.file_type") == 0 ||
         strcmp(k, "split.no") == 0 || strcmp(k, "split.count") == 0 || strcmp(k, "split.tensors.count") == 0;
}

static int64_t block_count(const gguf_t *g, const qz_tensor_desc_t *d, int64_t n) {
  const char *arch = gguf_arch(g);
  if (arch) {
    char key[128];
    int64_t v;
    snprintf(key, sizeof key, "%s.block_count", arch);
    if (gguf_get_int(g, key, &v) == GT_OK && v > 0) return v;
  }
  int64_t mx = 0;
  for (int64_t i = 0; i < n; i++) {
    int l = layer_of(d[i].name);
    if (l + 1 > mx) mx = l + 1;
  }
  return mx;
}

/* Streams tensor src (type st) into w as type dt. */
static int stream_tensor(const gguf_tensor_t *src, gt_type_t dt, gw_t *w, int n_threads,
                         gt_err_t *err) {
  const int64_t ne0 = src->ne[0];
  const int64_t nrows = src->ne[1] * src->ne[2] * src->ne[3];
  const uint8_t *p = src->data;
  int rc;
  if (dt == src->type) {
    size_t left = src->nbytes;
    while (left) {
      size_t k = left < ((size_t)8 << 20) ? left : ((size_t)8 << 20);
      if ((rc = gw_write(w, p, k, err))) return rc;
      p += k;
      left -= k;
    }
    return GT_OK;
  }
  size_t src_row = dt_row_bytes(src->type, ne0), dst_row = dt_row_bytes(dt, ne0);
  if (!src_row || !dst_row)
    return gt_err_set(err, GT_EINVAL, "tensor %s: row of %lld does not fit %s -> %s", src->name,
                      (long long)ne0, dt_name(src->type), dt_name(dt));
  int64_t chunk = ((int64_t)4 << 20) / ne0;
  if (chunk < 4 * (int64_t)(n_threads > 0 ? n_threads : 1)) chunk = 4 * (int64_t)(n_threads > 0 ? n_threads : 1);
  if (chunk > nrows) chunk = nrows;
  uint8_t *buf = malloc((size_t)chunk * dst_row);
  if (!buf) return gt_err_set(err, GT_ENOMEM, "tensor %s: out of memory", src->name);
  rc = GT_OK;
  for (int64_t r = 0; r < nrows && !rc; r += chunk) {
    int64_t k = nrows - r < chunk ? nrows - r : chunk;
    rc = qz_convert_rows(src->type, p + (size_t)r * src_row, src_row, dt, buf, ne0, k, n_threads, err);
    if (rc) gt_err_wrap(err, "tensor %s", src->name);
    if (!rc) rc = gw_write(w, buf, (size_t)k * dst_row, err);
  }
  free(buf);
  return rc;
}

int qz_quantize_file(const char *in_path, const char *out_path, qz_mix_t mix,
                     const qz_opts_t *opts, qz_stats_t *stats, gt_err_t *err) {
  if (!in_path || !out_path) return gt_err_set(err, GT_EINVAL, "quantize: NULL path");
  if ((int)mix < 0 || mix >= QZ_MIX_COUNT) return gt_err_set(err, GT_EINVAL, "quantize: bad type %d", (int)mix);
  qz_opts_t o = {0};
  if (opts) o = *opts;
  if (o.n_threads < 1) o.n_threads = 1;
  gguf_t *g = NULL;
  gw_t *w = NULL;
  qz_tensor_desc_t *d = NULL;
  gt_type_t *types = NULL;
  int64_t *order = NULL;
  int rc = gguf_open(in_path, &g, err);
  if (rc) return rc;
  const int64_t n = gguf_n_tensors(g);
  d = calloc((size_t)(n ? n : 1), sizeof *d);
  types = calloc((size_t)(n ? n : 1), sizeof *types);
  order = calloc((size_t)(n ? n : 1), sizeof *order);
  if (!d || !types || !order) {
    rc = gt_err_set(err, GT_ENOMEM, "quantize: out of memory");
    goto done;
  }
  for (int64_t i = 0; i < n; i++) {
    const gguf_tensor_t *t = gguf_tensor(g, i);
    d[i].name = t->name;
    d[i].n_dims = t->n_dims;
    memcpy(d[i].ne, t->ne, sizeof d[i].ne);
    d[i].type = t->type;
  }
  if ((rc = qz_plan_types(d, n, block_count(g, d, n), mix, o.flags, types, err))) goto done;
  for (int64_t i = 0; i < n; i++) {
    if (types[i] != d[i].type && (!qz_can_quantize(types[i]) ||
                                  (d[i].type != GT_TYPE_F32 && d[i].type != GT_TYPE_F16 &&
                                   d[i].type != GT_TYPE_BF16 && !dt_computable(d[i].type)))) {
      rc = gt_err_set(err, GT_EUNSUPPORTED, "tensor %s: cannot convert %s to %s", d[i].name,
                      dt_name(d[i].type), dt_name(types[i]));
      goto done;
    }
  }
  llama_order(d, n, order);
  if ((rc = gw_create(out_path, &w, err))) goto done;
  for (int64_t i = 0; i < gguf_n_kv(g); i++) {
    if (skip_key(gguf_key(g, i))) continue;
    if ((rc = copy_kv(g, i, w, err))) goto done;
  }
  if ((rc = gw_kv_u32(w, "general.quantization_version", 2, err)) ||
      (rc = gw_kv_u32(w, "general.file_type", qz_mix_file_type(mix), err)))
    goto done;
  for (int64_t k = 0; k < n; k++) {
    const qz_tensor_desc_t *t = &d[order[k]];
    if ((rc = gw_tensor(w, t->name, t->n_dims, t->ne, types[order[k]], err))) goto done;
  }
  if ((rc = gw_begin_data(w, err))) goto done;
  uint64_t bin = 0, bout = 0;
  for (int64_t k = 0; k < n; k++) {
    const gguf_tensor_t *t = gguf_tensor(g, order[k]);
    uint64_t ob = gw_tensor_nbytes(w, k);
    if (o.on_tensor) o.on_tensor(o.ud, k, n, t->name, t->n_dims, t->ne, t->type, types[order[k]], t->nbytes, ob);
    if ((rc = stream_tensor(t, types[order[k]], w, o.n_threads, err))) goto done;
    bin += t->nbytes;
    bout += ob;
  }
  uint64_t fsize = gw_header_bytes(w) + gw_data_bytes(w);
  gw_t *wf = w;
  w = NULL;
  if ((rc = gw_finish(wf, err))) goto done;
  if (stats) {
    stats->bytes_in = bin;
    stats->bytes_out = bout;
    stats->file_bytes = fsize;
    stats->n_tensors = n;
  }
done:
  gw_free(w);
  gguf_close(g);
  free(d);
  free(types);
  free(order);
  return rc;
}
