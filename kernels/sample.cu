/* kernels/sample.cu — see sample.cuh. One block of SMP_THREADS per row; the row's probabilities
 * live in global scratch (L2-resident: 0.6 MB for a 152k vocabulary) between the passes. */
#include "kernels/sample.cuh"

#define SMP_THREADS 1024
#define SMP_WARPS (SMP_THREADS / 32)
#define SMP_BINS 2048 /* largest radix digit: 11 bits */
#define SMP_NAN_BITS 0x7f800000u /* fp32 bit patterns above this (p >= 0) are NaN */

typedef unsigned long long u64;

typedef struct {
  unsigned cnt[SMP_BINS]; /* histogram of the current radix pass: elements per digit */
  u64 mass[SMP_BINS];     /* and their fixed-point mass */
  u64 scan_a[SMP_WARPS], scan_b[SMP_WARPS], tot_a, tot_b;
  double dsum[SMP_WARPS];
  float bv[SMP_WARPS];
  int bi[SMP_WARPS];
  int found, result;
  unsigned digit;
  u64 sel_c, sel_m;
} smp_shared_t;

/* fixed-point mass of a probability (bits of a float in [0, 1]): round(p * 2^63) */
__device__ __forceinline__ u64 smp_fx(unsigned bits) {
  return bits > SMP_NAN_BITS ? 0ull : __double2ull_rn((double)__uint_as_float(bits) * 0x1p63);
}

/* Exclusive prefix over the block's threads (in thread order) of a and b; totals in *ta, *tb. */
__device__ void smp_scan2(u64 a, u64 b, u64 *ea, u64 *eb, u64 *ta, u64 *tb, smp_shared_t *sh) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  u64 ia = a, ib = b;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const u64 xa = __shfl_up_sync(KC_FULL_MASK, ia, o), xb = __shfl_up_sync(KC_FULL_MASK, ib, o);
    if (lane >= o) {
      ia += xa;
      ib += xb;
    }
  }
  __syncthreads(); /* a previous call may still read scan_a / scan_b */
  if (lane == 31) {
    sh->scan_a[w] = ia;
    sh->scan_b[w] = ib;
  }
  __syncthreads();
  if (w == 0) {
    const u64 va = sh->scan_a[lane], vb = sh->scan_b[lane];
    u64 pa = va, pb = vb;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const u64 xa = __shfl_up_sync(KC_FULL_MASK, pa, o), xb = __shfl_up_sync(KC_FULL_MASK, pb, o);
      if (lane >= o) {
        pa += xa;
        pb += xb;
      }
    }
    sh->scan_a[lane] = pa - va;
    sh->scan_b[lane] = pb - vb;
    if (lane == 31) {
      sh->tot_a = pa;
      sh->tot_b = pb;
    }
  }
  __syncthreads();
  *ea = sh->scan_a[w] + ia - a;
  *eb = sh->scan_b[w] + ib - b;
  *ta = sh->tot_a;
  *tb = sh->tot_b;
}

/* Sum over the block in a fixed order (deterministic); every thread gets it. */
__device__ double smp_sum_f64(double v, smp_shared_t *sh) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(KC_FULL_MASK, v, o);
  __syncthreads();
  if (lane == 0) sh->dsum[w] = v;
  __syncthreads();
  double s = 0;
  for (int i = 0; i < SMP_WARPS; i++) s += sh->dsum[i];
  return s;
}

/* First index of the largest non-NaN value (-1 if none); every thread gets it. */
__device__ int smp_argmax(const float *x, int V, smp_shared_t *sh) {
  float bv = 0.0f;
  int bi = -1;
  for (int i = threadIdx.x; i < V; i += SMP_THREADS) {
    const float v = x[i];
    if (v == v && (bi < 0 || v > bv)) { /* increasing i: strict > keeps the lowest id */
      bv = v;
      bi = i;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(KC_FULL_MASK, bv, o);
    const int oi = __shfl_xor_sync(KC_FULL_MASK, bi, o);
    if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) {
      bv = ov;
      bi = oi;
    }
  }
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) {
    sh->bv[w] = bv;
    sh->bi[w] = bi;
  }
  __syncthreads();
  bv = 0.0f;
  bi = -1;
  for (int k = 0; k < SMP_WARPS; k++)
    if (sh->bi[k] >= 0 && (bi < 0 || sh->bv[k] > bv || (sh->bv[k] == bv && sh->bi[k] < bi))) {
      bv = sh->bv[k];
      bi = sh->bi[k];
    }
  return bi;
}

enum { SEL_COUNT, SEL_MASS_GE, SEL_MASS_GT };

/* whether a prefix of c elements and mass m meets the target */
__device__ __forceinline__ bool smp_meets(int kind, u64 target, u64 c, u64 m) {
  return kind == SEL_COUNT ? c >= target : kind == SEL_MASS_GE ? m >= target : m > target;
}

typedef struct {
  int found;
  int id;  /* the last element of the prefix */
  u64 n;   /* its length */
  u64 m;   /* its fixed-point mass */
} smp_sel_t;

/* The shortest prefix of the order (p descending, id ascending; NaN excluded) whose count is
 * >= target (SEL_COUNT, target >= 1), or whose mass is >= target (SEL_MASS_GE, target >= 1) or
 * > target (SEL_MASS_GT). found = 0 when the whole row does not meet it. Uniform over the block. */
__device__ smp_sel_t smp_select(const float *prob, int V, int kind, u64 target, smp_shared_t *sh) {
  const int shifts[3] = {21, 10, 0}, widths[3] = {11, 11, 10};
  unsigned prefix = 0, mask = 0;
  u64 above_c = 0, above_m = 0; /* elements strictly before the digits chosen so far */
  smp_sel_t res = {0, -1, 0, 0};
  for (int pass = 0; pass < 3; pass++) {
    const int shift = shifts[pass], nb = 1 << widths[pass], per = nb / SMP_THREADS;
    __syncthreads(); /* the previous pass's readers of the histogram and sh->digit are done */
    for (int b = threadIdx.x; b < nb; b += SMP_THREADS) {
      sh->cnt[b] = 0;
      sh->mass[b] = 0;
    }
    if (threadIdx.x == 0) sh->found = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < V; i += SMP_THREADS) {
      const unsigned bits = __float_as_uint(prob[i]);
      if (bits > SMP_NAN_BITS || (bits & mask) != prefix) continue;
      const unsigned d = (bits >> shift) & (unsigned)(nb - 1);
      atomicAdd(&sh->cnt[d], 1u);
      atomicAdd(&sh->mass[d], smp_fx(bits));
    }
    __syncthreads();
    /* thread t owns the digits at descending positions [t*per, t*per + per) */
    u64 lc = 0, lm = 0;
    for (int j = 0; j < per; j++) {
      const int d = nb - 1 - (threadIdx.x * per + j);
      lc += sh->cnt[d];
      lm += sh->mass[d];
    }
    u64 ec, em, tc, tm;
    smp_scan2(lc, lm, &ec, &em, &tc, &tm, sh);
    u64 cc = above_c + ec, cm = above_m + em;
    for (int j = 0; j < per; j++) {
      const int d = nb - 1 - (threadIdx.x * per + j);
      const u64 nc = cc + sh->cnt[d], nm = cm + sh->mass[d];
      if (!smp_meets(kind, target, cc, cm) && smp_meets(kind, target, nc, nm)) { /* one digit crosses */
        sh->found = 1;
        sh->digit = (unsigned)d;
        sh->sel_c = cc;
        sh->sel_m = cm;
      }
      cc = nc;
      cm = nm;
    }
    __syncthreads();
    if (!sh->found) return res;
    prefix |= sh->digit << shift;
    mask |= (unsigned)(nb - 1) << shift;
    above_c = sh->sel_c;
    above_m = sh->sel_m;
  }
  /* prefix is the boundary value; its ties come in id order: the j-th of them ends the prefix */
  const u64 fv = smp_fx(prefix);
  u64 j;
  if (kind == SEL_COUNT || fv == 0) /* fv == 0 cannot cross a mass target; kept for safety */
    j = target - above_c;
  else if (kind == SEL_MASS_GE)
    j = (target - above_m + fv - 1) / fv; /* fv > 0: this value's mass made the crossing */
  else
    j = (target - above_m) / fv + 1;
  const int chunk = (V + SMP_THREADS - 1) / SMP_THREADS, lo = threadIdx.x * chunk,
            hi = lo + chunk < V ? lo + chunk : V;
  u64 n = 0;
  for (int i = lo; i < hi; i++) n += __float_as_uint(prob[i]) == prefix;
  u64 e, e2, t, t2;
  smp_scan2(n, 0, &e, &e2, &t, &t2, sh);
  if (e < j && j <= e + n) {
    u64 k = e;
    for (int i = lo; i < hi; i++)
      if (__float_as_uint(prob[i]) == prefix && ++k == j) {
        sh->result = i;
        break;
      }
  }
  __syncthreads();
  res.found = 1;
  res.id = sh->result;
  res.n = above_c + j;
  res.m = above_m + j * fv;
  return res;
}

__global__ void __launch_bounds__(SMP_THREADS) sample_kernel(const float *__restrict__ logits, int V,
                                                             const kc_sample_row_t *__restrict__ rows,
                                                             float *__restrict__ probs, int32_t *__restrict__ ids) {
  kc_pdl_wait();
  kc_pdl_trigger();
  __shared__ smp_shared_t sh;
  const int row = blockIdx.x, tid = threadIdx.x;
  const kc_sample_row_t p = rows[row];
  const float *x = logits + (size_t)row * V;
  float *prob = probs + (size_t)row * V;

  int best = smp_argmax(x, V, &sh);
  if (best < 0 || x[0] != x[0]) best = 0; /* the CPU's argmax never leaves a NaN at id 0 */
  if (p.temperature <= 0 || p.top_k == 1) {
    if (tid == 0) ids[row] = best;
    return;
  }

  /* softmax at temperature, as sampler_pick: fp32 (x - max) / T, exp rounded to fp32, double sum */
  const float mx = x[best];
  double s = 0;
  for (int i = tid; i < V; i += SMP_THREADS) {
    const float q = (float)exp((double)__fdiv_rn(__fsub_rn(x[i], mx), p.temperature));
    prob[i] = q;
    s += (double)q;
  }
  const double sum = smp_sum_f64(s, &sh);
  const float pmax = (float)(1.0 / sum);
  for (int i = tid; i < V; i += SMP_THREADS) prob[i] = (float)((double)prob[i] / sum);
  __syncthreads();

  if (p.top_k <= 0 && p.top_p >= 1 && p.min_p <= 0) {
    /* plain temperature: the first id (index order) whose cumulative mass exceeds u */
    const u64 r = (u64)(p.u * 0x1p63);
    const int chunk = (V + SMP_THREADS - 1) / SMP_THREADS, lo = tid * chunk, hi = lo + chunk < V ? lo + chunk : V;
    u64 m = 0;
    for (int i = lo; i < hi; i++) m += smp_fx(__float_as_uint(prob[i]));
    if (tid == 0) sh.result = -1;
    u64 e, e2, t, t2;
    smp_scan2(m, 0, &e, &e2, &t, &t2, &sh);
    if (e <= r && r < e + m) {
      u64 c = e;
      for (int i = lo; i < hi; i++) {
        c += smp_fx(__float_as_uint(prob[i]));
        if (r < c) {
          sh.result = i;
          break;
        }
      }
    }
    __syncthreads();
    if (tid == 0) ids[row] = sh.result >= 0 ? sh.result : best;
    return;
  }

  /* candidates: p >= min_p * pmax (min-p), else every p (>= 0; NaN never) */
  const float thr = p.min_p > 0 ? __fmul_rn(p.min_p, pmax) : 0.0f;
  u64 n0 = 0, m0 = 0;
  for (int i = tid; i < V; i += SMP_THREADS) {
    const float q = prob[i];
    if (q >= thr) {
      n0++;
      m0 += smp_fx(__float_as_uint(q));
    }
  }
  {
    u64 e, e2;
    smp_scan2(n0, m0, &e, &e2, &n0, &m0, &sh);
  }
  u64 lim_n = n0, lim_m = m0; /* the kept prefix: length and mass */
  if (p.top_k > 0 && (u64)p.top_k < lim_n) {
    const smp_sel_t k = smp_select(prob, V, SEL_COUNT, (u64)p.top_k, &sh);
    lim_n = k.n;
    lim_m = k.m;
  }
  if (p.top_p < 1) {
    const u64 target = (u64)ceil((double)p.top_p * 0x1p63);
    const smp_sel_t c = smp_select(prob, V, SEL_MASS_GE, target > 0 ? target : 1, &sh);
    if (c.found && c.n < lim_n) {
      lim_n = c.n;
      lim_m = c.m;
    }
  }
  int id = best;
  if (lim_n > 0) {
    /* the draw: the shortest prefix with mass > u * kept mass (exact: floor of the 117-bit product) */
    const u64 k53 = (u64)(p.u * 0x1p53), lo = k53 * lim_m, hi = __umul64hi(k53, lim_m);
    const u64 r = (hi << 11) | (lo >> 53);
    smp_sel_t d = smp_select(prob, V, SEL_MASS_GT, r, &sh);
    if (!d.found || d.n > lim_n) d = smp_select(prob, V, SEL_COUNT, lim_n, &sh); /* the CPU's idx[n - 1] */
    id = d.id;
  }
  if (tid == 0) ids[row] = id;
}

KC_API size_t kc_sample_scratch_floats(int n_rows, int n_vocab) { return (size_t)n_rows * (size_t)n_vocab; }

KC_API int kc_sample(cudaStream_t st, const float *logits, int n_rows, int n_vocab, const kc_sample_row_t *rows,
                     float *scratch, int32_t *ids) {
  if (n_rows <= 0 || n_vocab <= 0) return 0;
  kc_launch(sample_kernel, n_rows, SMP_THREADS, 0, st, logits, n_vocab, rows, scratch, ids);
  return (int)cudaGetLastError();
}
