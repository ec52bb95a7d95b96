/* tools/mkmodel.h — synthetic production-shape Qwen3 / Qwen3.5 GGUF files.
 *
 * A preset gives a model's real shapes; mk_plan_create() derives the tensor table (llama.cpp
 * names and ggml-order shapes, the types a convert + llama-quantize would give), the metadata
 * (same keys as llama.cpp writes) and a byte-level tokenizer section. mk_write() streams a
 * valid GGUF with random weights (normal, trained-model-like scales), generating and
 * quantizing row by row: memory stays a few MB per thread whatever the model size. */
#ifndef GANTRY_ENGINE_MKMODEL_H
#define GANTRY_ENGINE_MKMODEL_H

#include <stdint.h>

#include "common/err.h"
#include "format/dtype.h"

typedef struct {
  const char *name;   /* "qwen3-8b", "qwen35-9b", ... */
  const char *arch;   /* "qwen3" | "qwen35" */
  const char *label;  /* general.name */
  const char *size_label;
  int n_layer;        /* decoder layers (MTP layers not included) */
  int n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab;
  int ctx_len;
  float rope_theta, rms_eps;
  /* qwen35 only */
  int rope_dim;       /* rope.dimension_count (partial rotary) */
  int full_attn_interval;
  int ssm_conv, ssm_k_heads, ssm_v_heads, ssm_head_dim;
  int n_nextn;        /* MTP (nextn) layers of the real checkpoint (written only with_mtp) */
  int tied;           /* 1: no output.weight */
} mk_preset_t;

/* Presets: qwen3-8b, qwen35-9b, qwen35-27b, qwen3-tiny, qwen35-tiny. NULL if unknown. */
const mk_preset_t *mk_preset(const char *name);
/* Name of preset i, NULL past the end. */
const char *mk_preset_name(int i);

typedef enum { MK_INIT_NORMAL, MK_INIT_NORM, MK_INIT_SSM_A, MK_INIT_DT_BIAS } mk_init_t;

typedef struct {
  char name[64];
  uint32_t n_dims;
  int64_t ne[4];       /* ggml order, unused dims 1 */
  gt_type_t src_type;  /* type in a converted (bf16) file: BF16 for matrices, F32 otherwise */
  gt_type_t type;      /* type in this file */
  mk_init_t init;
  float std;           /* MK_INIT_NORMAL / MK_INIT_NORM spread */
  int layer;           /* -1 for non-layer tensors */
  int mtp;             /* 1 for tensors of an MTP layer */
  uint64_t offset;     /* in the data section */
  uint64_t nbytes;
} mk_tensor_t;

typedef struct mk_plan {
  const mk_preset_t *p;
  char type_name[16];
  mk_tensor_t *t;
  int64_t n;
  uint64_t header_bytes, data_bytes; /* file size = header_bytes + data_bytes */
  uint64_t bytes_per_token;          /* every tensor but token_embd and MTP layers */
  uint64_t mtp_bytes;                /* tensors of MTP layers */
  int n_nextn;                       /* MTP layers written: p->n_nextn with_mtp, else 0 */
  mk_preset_t shape;                 /* the preset with mk_plan_create_sized's overrides (p points here) */
} mk_plan_t;

/* Type names: bf16, f16, f32, Q8_0, Q4_K, Q5_K, Q6_K, Q4_K_M (case-insensitive).
 * keep_output_bf16: the output head stays BF16 (default on for qwen35 presets with Q4_K_M,
 * as the production Qwen3.5 files have it; pass -1 for the preset's default, 0/1 to force).
 * with_mtp: append the preset's MTP (nextn) layers. Off, the file has what llama.cpp's
 * converter writes for the checkpoint (it drops MTP layers, and llama.cpp refuses a qwen35 file
 * that has them), so the same file loads in gantry and in llama.cpp.
 * On success *out owns the plan (mk_plan_free). */
int mk_plan_create(const char *preset, const char *type, int keep_output_bf16, int with_mtp, mk_plan_t **out,
                   gt_err_t *err);
/* mk_plan_create with the preset's decoder layers and / or vocabulary replaced (0: the preset's):
 * one production-width layer stack without a whole model (scripts/gpu/tp_local.sh: TP shape
 * checks, the per-layer slope of the TP prediction). GT_EINVAL for n_layer < 0 or <= the MTP
 * layers asked for, or a vocabulary the tokenizer cannot hold (< 256 + its specials). */
int mk_plan_create_sized(const char *preset, const char *type, int keep_output_bf16, int with_mtp, int n_layer,
                         int n_vocab, mk_plan_t **out, gt_err_t *err);
void mk_plan_free(mk_plan_t *p);

/* Writes the plan to path with weights from seed, using n_threads threads. */
int mk_write(const mk_plan_t *p, const char *path, uint64_t seed, int n_threads, gt_err_t *err);

#endif
