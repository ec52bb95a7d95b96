/* format/gguf_write.h — streaming GGUF v3 writer.
 *
 * Use in three phases, in this order:
 *   1. metadata: gw_kv_* (any value type, arrays of numbers and of strings);
 *   2. tensor infos: gw_tensor() declares name, dims (ggml order: ne[0] = row length) and
 *      type; offsets follow from the sizes and the alignment (general.alignment, default 32);
 *   3. data: gw_begin_data() writes the header, then gw_write() streams every tensor's bytes
 *      in declared order, in pieces of any size; padding is inserted between tensors.
 *      gw_finish() checks that everything was written and closes the file.
 * Metadata and tensor infos are held in memory (they are small); tensor data never is.
 * Errors are values: wrong order, size mismatch, duplicate key/tensor, I/O failure (disk
 * full) each give a GT_E* code and a message. After an I/O error every later call fails.
 * A writer created with path NULL never writes: it only computes the layout (header and data
 * sizes, tensor offsets) — used to print a file's tensor table without producing it. */
#ifndef GANTRY_ENGINE_GGUF_WRITE_H
#define GANTRY_ENGINE_GGUF_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "format/dtype.h"
#include "format/gguf.h"

typedef struct gw gw_t;

/* Creates a writer for path (truncated), or a layout-only writer when path is NULL.
 * On success *out is owned by the caller: release it with gw_finish() or gw_free(). */
int gw_create(const char *path, gw_t **out, gt_err_t *err);
/* Closes the file (if still open) and frees everything. An unfinished file is left as is. */
void gw_free(gw_t *w);

/* Metadata (phase 1). Keys must be unique and non-empty. A u32 (or other integer) key
 * "general.alignment" sets the data alignment (a power of two). */
int gw_kv_u8(gw_t *w, const char *key, uint8_t v, gt_err_t *err);
int gw_kv_i8(gw_t *w, const char *key, int8_t v, gt_err_t *err);
int gw_kv_u16(gw_t *w, const char *key, uint16_t v, gt_err_t *err);
int gw_kv_i16(gw_t *w, const char *key, int16_t v, gt_err_t *err);
int gw_kv_u32(gw_t *w, const char *key, uint32_t v, gt_err_t *err);
int gw_kv_i32(gw_t *w, const char *key, int32_t v, gt_err_t *err);
int gw_kv_u64(gw_t *w, const char *key, uint64_t v, gt_err_t *err);
int gw_kv_i64(gw_t *w, const char *key, int64_t v, gt_err_t *err);
int gw_kv_f32(gw_t *w, const char *key, float v, gt_err_t *err);
int gw_kv_f64(gw_t *w, const char *key, double v, gt_err_t *err);
int gw_kv_bool(gw_t *w, const char *key, int v, gt_err_t *err);
/* s[0..len) (need not be NUL-terminated). */
int gw_kv_str(gw_t *w, const char *key, const char *s, size_t len, gt_err_t *err);
/* Array of n numbers/bools of elem_type, data = n little-endian elements (copied). */
int gw_kv_arr(gw_t *w, const char *key, gguf_vtype_t elem_type, const void *data, uint64_t n,
              gt_err_t *err);
/* Array of n strings; lens may be NULL (then every strs[i] is NUL-terminated). Copied. */
int gw_kv_arr_str(gw_t *w, const char *key, const char *const *strs, const size_t *lens,
                  uint64_t n, gt_err_t *err);
/* Incremental string array (for large vocabularies): begin with the final count, add exactly
 * n strings, then the next gw_* call continues normally. If an add fails, the whole array
 * (key included) is dropped and the writer stays usable. */
int gw_kv_arr_str_begin(gw_t *w, const char *key, uint64_t n, gt_err_t *err);
int gw_kv_arr_str_add(gw_t *w, const char *s, size_t len, gt_err_t *err);

int64_t gw_n_kv(const gw_t *w);
/* 1 if key was added. */
int gw_has_key(const gw_t *w, const char *key);

/* Tensor infos (phase 2). n_dims 1..4, ne[i] >= 1, ne[0] a multiple of the type's block
 * size, names unique and shorter than 64 bytes (ggml's limit). */
int gw_tensor(gw_t *w, const char *name, uint32_t n_dims, const int64_t *ne, gt_type_t type,
              gt_err_t *err);

int64_t gw_n_tensors(const gw_t *w);
/* Offset (relative to the data section) and size in bytes of tensor i; 0 if out of range. */
uint64_t gw_tensor_offset(const gw_t *w, int64_t i);
uint64_t gw_tensor_nbytes(const gw_t *w, int64_t i);
size_t gw_alignment(const gw_t *w);
/* Bytes of the header including the padding before the data section (valid in any phase). */
uint64_t gw_header_bytes(const gw_t *w);
/* Bytes of the data section (every tensor padded to the alignment). */
uint64_t gw_data_bytes(const gw_t *w);

/* Data (phase 3). Writes the header; no more keys or tensors may be added afterwards. */
int gw_begin_data(gw_t *w, gt_err_t *err);
/* Appends len bytes to the current tensor (the first one not yet complete). A piece may not
 * cross the end of a tensor. */
int gw_write(gw_t *w, const void *data, size_t len, gt_err_t *err);
/* Index of the tensor gw_write() fills next (n_tensors when all are complete). */
int64_t gw_current_tensor(const gw_t *w);
/* Checks that all tensors were fully written, flushes and closes the file, frees w (also on
 * error: w is always consumed). */
int gw_finish(gw_t *w, gt_err_t *err);

#endif
