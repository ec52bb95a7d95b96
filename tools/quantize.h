/* tools/quantize.h — weight quantization (row quantizers, llama.cpp's type mixes, files).
 *
 * Row quantizers are ggml's reference round-to-nearest paths (quantize_row_*_ref in
 * ggml-quants.c, including the make_qkx2_quants / make_qx_quants scale searches), which is
 * what llama-quantize uses without an importance matrix. */
#ifndef GANTRY_ENGINE_QUANTIZE_H
#define GANTRY_ENGINE_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "format/dtype.h"

/* dst = row src[0..n) in type t: F32, F16, BF16, Q8_0, Q4_K, Q5_K or Q6_K. n must be a
 * multiple of the block size; dst holds dt_row_bytes(t, n) bytes.
 * Returns GT_OK, GT_EINVAL (bad n / NULL) or GT_EUNSUPPORTED (other types). */
int qz_quantize_row(gt_type_t t, const float *src, void *dst, int64_t n);
/* 1 if qz_quantize_row supports t. */
int qz_can_quantize(gt_type_t t);
/* dst[0..n) = row src of type t as fp32: dt_dequant_row, with a NULL check (GT_EINVAL). */
int qz_row_to_f32(gt_type_t t, const void *src, float *dst, int64_t n);

/* File-level mixes (the TYPE argument of gantry-quantize). Q8_0 and Q6_K are llama.cpp's
 * ftypes of those names; Q4_K_M is llama.cpp's Q4_K_M mix; Q4_K and Q5_K put every
 * quantizable tensor in that type except the output head (Q6_K, as llama.cpp does for every
 * k-quant mix). F16/BF16/F32 convert every quantizable tensor. */
typedef enum {
  QZ_MIX_Q8_0,
  QZ_MIX_Q4_K,
  QZ_MIX_Q5_K,
  QZ_MIX_Q6_K,
  QZ_MIX_Q4_K_M,
  QZ_MIX_F16,
  QZ_MIX_BF16,
  QZ_MIX_F32,
  QZ_MIX_COUNT
} qz_mix_t;

/* Flags */
#define QZ_KEEP_OUTPUT_BF16 1u /* output head (or tied token_embd) in BF16 */

/* Parses "Q8_0", "Q4_K", "Q4_K_M", "bf16", ... (case-insensitive). GT_EINVAL if unknown. */
int qz_mix_from_name(const char *s, qz_mix_t *out);
const char *qz_mix_name(qz_mix_t m);
/* llama_ftype value written to general.file_type. */
uint32_t qz_mix_file_type(qz_mix_t m);

typedef struct {
  const char *name;
  uint32_t n_dims;
  int64_t ne[4];  /* ggml order, unused dims 1 */
  gt_type_t type; /* type in the source file */
} qz_tensor_desc_t;

/* Chooses each tensor's output type like llama.cpp's llama_tensor_get_type for mix:
 * tensors that are not quantized (1-D, norms, ssm_conv1d, non-".weight", ...) keep their
 * type; counters (attn_v / attn_qkv / ffn_down layer positions) run in llama.cpp's tensor
 * order (by layer, then name). n_layer_all = <arch>.block_count (MTP layers included).
 * A k-quant whose row length is not a multiple of 256 falls back to Q8_0 when the row is a
 * multiple of 32 (llama.cpp uses Q5_0/Q5_1 for Q4_K/Q5_K, which gantry does not compute),
 * else the tensor keeps its type. out[i] receives the type of t[i]. */
int qz_plan_types(const qz_tensor_desc_t *t, int64_t n, int64_t n_layer_all, qz_mix_t mix,
                  unsigned flags, gt_type_t *out, gt_err_t *err);

/* Runs fn on each of n (1..QZ_MAX_THREADS) jobs, job i at (char *)jobs + i * job_size: jobs
 * 1..n-1 on threads of their own (in the caller when a thread cannot start), job 0 in the caller;
 * returns when all have ended. Results travel in the jobs. */
#define QZ_MAX_THREADS 256
void qz_run_jobs(void *(*fn)(void *), void *jobs, size_t job_size, int n);
/* Quantizes rows [0, nrows) of row length n from src (type st, row stride src_row_bytes)
 * into dst (type dt, rows packed), using n_threads threads (<= 1: the caller's thread). */
int qz_convert_rows(gt_type_t st, const void *src, size_t src_row_bytes, gt_type_t dt,
                    void *dst, int64_t n, int64_t nrows, int n_threads, gt_err_t *err);

typedef struct {
  unsigned flags;    /* QZ_KEEP_OUTPUT_BF16 */
  int n_threads;     /* <= 0: 1 */
  /* Called once per tensor before its data is written (may be NULL). */
  void (*on_tensor)(void *ud, int64_t i, int64_t n, const char *name, uint32_t n_dims,
                    const int64_t *ne, gt_type_t from, gt_type_t to, uint64_t bytes_in,
                    uint64_t bytes_out);
  void *ud;
} qz_opts_t;

typedef struct {
  uint64_t bytes_in;   /* tensor data of the input */
  uint64_t bytes_out;  /* tensor data of the output */
  uint64_t file_bytes; /* size of the output file */
  int64_t n_tensors;
} qz_stats_t;

/* Reads GGUF in_path, writes out_path with tensors converted per mix (all metadata copied;
 * general.quantization_version and general.file_type set and moved last, as llama-quantize
 * does; tensors in llama.cpp's order). Streams: memory stays a few MB per thread.
 * stats may be NULL. On error out_path may be left incomplete. */
int qz_quantize_file(const char *in_path, const char *out_path, qz_mix_t mix,
                     const qz_opts_t *opts, qz_stats_t *stats, gt_err_t *err);

#endif
