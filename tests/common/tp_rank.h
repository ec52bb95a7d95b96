/* tests/common/tp_rank.h — one tensor-parallel rank's shapes of a gantry-mkmodel production preset
 * (issue 28), shared by the GPU op test (tests/gpu/test_cuda_ops.c test_tp_shapes_*) and its
 * GPU-less part in CI (tests/unit/test_tp_parts.c): the hyperparameters as the loaders read them,
 * and the rows / columns a rank keeps of each product per model_shard_plan. */
#ifndef GANTRY_TESTS_TP_RANK_H
#define GANTRY_TESTS_TP_RANK_H

#include <stdint.h>

#include "common/err.h"
#include "engine/models/model.h"
#include "engine/models/shard.h"
#include "tools/mkmodel.h"

/* The hyperparameters of preset p, as the loaders read them from its GGUF. */
model_hparams_t tpr_preset_hp(const mk_preset_t *p);

/* A rank's shape of tensor `name` (full ne0 = cols, ne1 = rows in *cols / *rows on entry): its rows
 * (column-parallel) or columns (row-parallel, *row_parallel = 1) per sh. 0: not a product. */
int tpr_shard_shape(const model_hparams_t *hp, const model_shard_t *sh, const char *name, int64_t *rows, int64_t *cols,
                    int *row_parallel);

/* One distinct product of a rank: weight type, the rank's rows x cols, row-parallel or not, and the
 * first tensor with that shape. */
typedef struct {
  gt_type_t t;
  int64_t rows, cols;
  int row_parallel;
  char name[64];
} tpr_product_t;
#define TPR_MAX_PRODUCTS 64

/* The distinct products (type, rows, cols) of rank sh over every layer of preset's Q4_K_M file
 * (mkmodel's tensor table and types), into out[TPR_MAX_PRODUCTS]. Returns their count, or -1 with
 * err naming the tensor when a row-parallel slice would cut a quantization block (the loader
 * refuses that shape) or the table cannot be made. */
int tpr_rank_products(const char *preset, const model_hparams_t *hp, const model_shard_t *sh, tpr_product_t *out,
                      gt_err_t *err);

#endif
