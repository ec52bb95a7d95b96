/* format/gguf.h — GGUF v2/v3 reader (read-only, mmap).
 *
 * Every count, offset, size and string length is validated against the file before use: a
 * truncated or hostile file yields GT_EFORMAT with a message naming the problem (which key,
 * which tensor, which offset), never a crash or an out-of-bounds read.
 *
 * Strings inside the file are NOT NUL-terminated; accessors return (pointer, length) into the
 * mapping. Keys and tensor names are copied and NUL-terminated at open. */
#ifndef GANTRY_ENGINE_GGUF_H
#define GANTRY_ENGINE_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "format/dtype.h"

typedef enum {
  GGUF_VT_UINT8 = 0,
  GGUF_VT_INT8 = 1,
  GGUF_VT_UINT16 = 2,
  GGUF_VT_INT16 = 3,
  GGUF_VT_UINT32 = 4,
  GGUF_VT_INT32 = 5,
  GGUF_VT_FLOAT32 = 6,
  GGUF_VT_BOOL = 7,
  GGUF_VT_STRING = 8,
  GGUF_VT_ARRAY = 9,
  GGUF_VT_UINT64 = 10,
  GGUF_VT_INT64 = 11,
  GGUF_VT_FLOAT64 = 12,
  GGUF_VT_COUNT
} gguf_vtype_t;

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

typedef struct gguf gguf_t;

typedef struct {
  const char *name;        /* NUL-terminated copy */
  uint32_t n_dims;         /* 1..4 */
  int64_t ne[GGUF_MAX_DIMS]; /* ne[0] = innermost (row length), unused dims = 1 (ggml order) */
  gt_type_t type;
  uint64_t offset;         /* relative to the start of the data section */
  size_t nbytes;           /* ne[0]..ne[3] product in bytes of `type` */
  const void *data;        /* pointer into the mapping (aligned as the file says) */
} gguf_tensor_t;

/* Opens and maps path, parses and validates everything. On success *out owns the mapping. */
int gguf_open(const char *path, gguf_t **out, gt_err_t *err);
/* Same, over a caller-owned buffer that must outlive the gguf_t (used by tests and fuzzers). */
int gguf_open_buffer(const void *buf, size_t len, gguf_t **out, gt_err_t *err);
void gguf_close(gguf_t *g);

uint32_t gguf_version(const gguf_t *g);
size_t gguf_alignment(const gguf_t *g);
size_t gguf_file_size(const gguf_t *g);
size_t gguf_data_offset(const gguf_t *g); /* byte offset of the data section in the file */

/* Metadata. Keys are indexed 0..gguf_n_kv()-1. */
int64_t gguf_n_kv(const gguf_t *g);
const char *gguf_key(const gguf_t *g, int64_t i);
gguf_vtype_t gguf_kv_type(const gguf_t *g, int64_t i);
/* Index of key, or -1. O(1) average. */
int64_t gguf_find_key(const gguf_t *g, const char *key);

/* Typed getters by key name. Return GT_OK, GT_ENOTFOUND (no such key) or GT_EFORMAT (the
 * value has another type, or does not fit). get_int accepts any integer type and bool;
 * get_float accepts float32/64 and integers. */
int gguf_get_int(const gguf_t *g, const char *key, int64_t *out);
int gguf_get_float(const gguf_t *g, const char *key, double *out);
int gguf_get_bool(const gguf_t *g, const char *key, int *out);
int gguf_get_str(const gguf_t *g, const char *key, const char **s, size_t *len);

/* Arrays: element type and count. Nested arrays are parsed (validated) but not accessible. */
int gguf_get_arr(const gguf_t *g, const char *key, gguf_vtype_t *elem_type, uint64_t *n);
/* Raw little-endian element data of a numeric/bool array (n * elem size bytes), or NULL. */
const void *gguf_arr_data(const gguf_t *g, const char *key);
/* Element i of a numeric array converted: returns GT_OK / GT_ERANGE / GT_EFORMAT. */
int gguf_arr_int(const gguf_t *g, const char *key, uint64_t i, int64_t *out);
int gguf_arr_float(const gguf_t *g, const char *key, uint64_t i, double *out);
/* Element i of a string array, O(1). */
int gguf_arr_str(const gguf_t *g, const char *key, uint64_t i, const char **s, size_t *len);

/* Tensors, in file order. */
int64_t gguf_n_tensors(const gguf_t *g);
const gguf_tensor_t *gguf_tensor(const gguf_t *g, int64_t i);
/* By name, or NULL. O(1) average. */
const gguf_tensor_t *gguf_find_tensor(const gguf_t *g, const char *name);

/* "general.architecture" or NULL. Convenience for prefixing arch keys. */
const char *gguf_arch(const gguf_t *g); /* NUL-terminated copy owned by g */

#endif
