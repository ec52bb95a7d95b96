/* format/gguf.c — GGUF v2/v3 reader over a read-only mapping (or a caller's buffer).
 *
 * Parsing is a single pass with a bounds-checked cursor: every length, count and offset read
 * from the file is compared against the bytes that remain before it is used, with arithmetic
 * that cannot overflow. Values are not copied: a kv entry records where its payload lies in
 * the buffer; string arrays get an index of element offsets so element i is O(1). */
#include "format/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define MAX_ARRAY_DEPTH 8
#define MAX_NAME_LEN 65535     /* keys / tensor names longer than this are rejected */
#define MAX_ALIGNMENT (1u << 30)

typedef struct {
  char *key;               /* NUL-terminated copy */
  gguf_vtype_t type;
  size_t off;              /* scalar: value; string: bytes; array: first element */
  uint64_t len;            /* string: byte length; array: element count */
  gguf_vtype_t elem_type;  /* arrays only */
  size_t *str_off;         /* string arrays: offset of each element's bytes (length at -8) */
} kv_t;

struct gguf {
  const uint8_t *base;
  size_t size;
  int mapped;
  uint32_t version;
  size_t alignment;
  size_t data_off;
  int64_t n_kv;
  kv_t *kv;
  int64_t n_tensors;
  gguf_tensor_t *tensors;
  int64_t *kv_hash;      /* open addressing, -1 = empty; cap = power of two */
  size_t kv_cap;
  int64_t *t_hash;
  size_t t_cap;
  char *arch;
};

/* ---------------------------------------------------------------- cursor */

typedef struct {
  const uint8_t *p;
  size_t len;
  size_t pos;
  gt_err_t *err;
} cur_t;

static inline size_t cur_left(const cur_t *c) { return c->len - c->pos; }

static int rd_bytes(cur_t *c, void *dst, size_t n, const char *what) {
  if (n > cur_left(c))
    return gt_err_set(c->err, GT_EFORMAT, "truncated: %s at offset %zu needs %zu bytes, %zu left",
                      what, c->pos, n, cur_left(c));
  memcpy(dst, c->p + c->pos, n);
  c->pos += n;
  return GT_OK;
}

static int rd_u32(cur_t *c, uint32_t *v, const char *what) { return rd_bytes(c, v, 4, what); }
static int rd_u64(cur_t *c, uint64_t *v, const char *what) { return rd_bytes(c, v, 8, what); }

/* Reads a GGUF string header (u64 length) and checks the bytes are present; returns the
 * offset of the bytes in *off and the length in *n, and advances past them. */
static int rd_str(cur_t *c, size_t *off, uint64_t *n, const char *what) {
  size_t at = c->pos;
  int rc = rd_u64(c, n, what);
  if (rc) return rc;
  if (*n > cur_left(c))
    return gt_err_set(c->err, GT_EFORMAT,
                      "%s: string length %llu at offset %zu runs past end of file (%zu bytes left)",
                      what, (unsigned long long)*n, at, cur_left(c));
  *off = c->pos;
  c->pos += (size_t)*n;
  return GT_OK;
}

static size_t vt_size(uint32_t t) {
  switch (t) {
    case GGUF_VT_UINT8: case GGUF_VT_INT8: case GGUF_VT_BOOL: return 1;
    case GGUF_VT_UINT16: case GGUF_VT_INT16: return 2;
    case GGUF_VT_UINT32: case GGUF_VT_INT32: case GGUF_VT_FLOAT32: return 4;
    case GGUF_VT_UINT64: case GGUF_VT_INT64: case GGUF_VT_FLOAT64: return 8;
    default: return 0; /* string, array, unknown */
  }
}

static const char *vt_name(uint32_t t) {
  static const char *names[GGUF_VT_COUNT] = {"uint8", "int8", "uint16", "int16", "uint32",
                                             "int32", "float32", "bool", "string", "array",
                                             "uint64", "int64", "float64"};
  return t < GGUF_VT_COUNT ? names[t] : "?";
}

/* Skips (validates) one value of type t; depth bounds the recursion of nested arrays. Every
 * element consumes at least one byte of the file, so the work is linear in the file size. */
static int skip_value(cur_t *c, uint32_t t, const char *key, int depth);

static int skip_array(cur_t *c, const char *key, int depth, uint32_t *elem_type, uint64_t *n,
                      size_t *first) {
  if (depth >= MAX_ARRAY_DEPTH)
    return gt_err_set(c->err, GT_EFORMAT, "key '%s': arrays nested deeper than %d at offset %zu",
                      key, MAX_ARRAY_DEPTH, c->pos);
  int rc = rd_u32(c, elem_type, "array type");
  if (rc) return gt_err_wrap(c->err, "key '%s'", key);
  rc = rd_u64(c, n, "array length");
  if (rc) return gt_err_wrap(c->err, "key '%s'", key);
  *first = c->pos;
  uint32_t et = *elem_type;
  if (et >= GGUF_VT_COUNT)
    return gt_err_set(c->err, GT_EFORMAT, "key '%s': unknown array element type %u at offset %zu",
                      key, et, c->pos - 12);
  size_t es = vt_size(et);
  if (es) {
    if (*n > cur_left(c) / es)
      return gt_err_set(c->err, GT_EFORMAT,
                        "key '%s': array of %llu %s at offset %zu runs past end of file", key,
                        (unsigned long long)*n, vt_name(et), *first);
    if (et == GGUF_VT_BOOL) {
      for (uint64_t i = 0; i < *n; i++)
        if (c->p[c->pos + i] > 1)
          return gt_err_set(c->err, GT_EFORMAT, "key '%s': bool element %llu has value %u", key,
                            (unsigned long long)i, c->p[c->pos + i]);
    }
    c->pos += (size_t)(*n * es);
    return GT_OK;
  }
  /* strings need >= 8 bytes each, nested arrays >= 12: reject absurd counts up front */
  size_t min_el = et == GGUF_VT_STRING ? 8 : 12;
  if (*n > cur_left(c) / min_el)
    return gt_err_set(c->err, GT_EFORMAT,
                      "key '%s': array of %llu %s at offset %zu cannot fit in the file", key,
                      (unsigned long long)*n, vt_name(et), *first);
  for (uint64_t i = 0; i < *n; i++) {
    rc = skip_value(c, et, key, depth + 1);
    if (rc) return rc;
  }
  return GT_OK;
}

static int skip_value(cur_t *c, uint32_t t, const char *key, int depth) {
  size_t es = vt_size(t);
  if (es) {
    if (es > cur_left(c))
      return gt_err_set(c->err, GT_EFORMAT, "key '%s': %s value at offset %zu truncated", key,
                        vt_name(t), c->pos);
    if (t == GGUF_VT_BOOL && c->p[c->pos] > 1)
      return gt_err_set(c->err, GT_EFORMAT, "key '%s': bool value %u at offset %zu", key,
                        c->p[c->pos], c->pos);
    c->pos += es;
    return GT_OK;
  }
  if (t == GGUF_VT_STRING) {
    size_t off;
    uint64_t n;
    int rc = rd_str(c, &off, &n, "string value");
    return rc ? gt_err_wrap(c->err, "key '%s'", key) : GT_OK;
  }
  if (t == GGUF_VT_ARRAY) {
    uint32_t et = 0;
    uint64_t n;
    size_t first;
    return skip_array(c, key, depth, &et, &n, &first);
  }
  return gt_err_set(c->err, GT_EFORMAT, "key '%s': unknown value type %u at offset %zu", key, t,
                    c->pos - 4);
}

/* ---------------------------------------------------------------- hashing */

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; s++) {
    h ^= (uint8_t)*s;
    h *= 1099511628211ull;
  }
  return h;
}

static size_t hash_cap(int64_t n) {
  size_t cap = 16;
  while (cap < (size_t)n * 2) cap <<= 1;
  return cap;
}

/* Inserts index i under name(i); returns the index already there on a duplicate, else -1. */
typedef const char *(*name_fn)(const gguf_t *, int64_t);

static int64_t hash_insert(const gguf_t *g, int64_t *tab, size_t cap, name_fn nm, int64_t i) {
  const char *name = nm(g, i);
  size_t mask = cap - 1, h = (size_t)hash_str(name) & mask;
  while (tab[h] >= 0) {
    if (strcmp(nm(g, tab[h]), name) == 0) return tab[h];
    h = (h + 1) & mask;
  }
  tab[h] = i;
  return -1;
}

static int64_t hash_find(const gguf_t *g, const int64_t *tab, size_t cap, name_fn nm,
                         const char *name) {
  if (!tab || !name) return -1;
  size_t mask = cap - 1, h = (size_t)hash_str(name) & mask;
  while (tab[h] >= 0) {
    if (strcmp(nm(g, tab[h]), name) == 0) return tab[h];
    h = (h + 1) & mask;
  }
  return -1;
}

static const char *kv_name(const gguf_t *g, int64_t i) { return g->kv[i].key; }
static const char *t_name(const gguf_t *g, int64_t i) { return g->tensors[i].name; }

/* ---------------------------------------------------------------- parsing */

/* Copies a name (key or tensor name) out of the buffer, rejecting empty names, embedded NULs
 * and absurd lengths. */
static int copy_name(cur_t *c, const char *what, int64_t idx, char **out) {
  size_t at = c->pos, off;
  uint64_t n;
  int rc = rd_str(c, &off, &n, "name");
  if (rc) return gt_err_wrap(c->err, "%s %lld", what, (long long)idx);
  if (n == 0 || n > MAX_NAME_LEN)
    return gt_err_set(c->err, GT_EFORMAT, "%s %lld at offset %zu: bad name length %llu", what,
                      (long long)idx, at, (unsigned long long)n);
  if (memchr(c->p + off, 0, (size_t)n))
    return gt_err_set(c->err, GT_EFORMAT, "%s %lld at offset %zu: name contains a NUL byte", what,
                      (long long)idx, at);
  char *s = malloc((size_t)n + 1);
  if (!s) return gt_err_set(c->err, GT_ENOMEM, "out of memory copying %s %lld", what, (long long)idx);
  memcpy(s, c->p + off, (size_t)n);
  s[n] = 0;
  *out = s;
  return GT_OK;
}

static int parse_kv(gguf_t *g, cur_t *c, int64_t i) {
  kv_t *kv = &g->kv[i];
  int rc = copy_name(c, "key", i, &kv->key);
  if (rc) return rc;
  uint32_t t = 0;
  rc = rd_u32(c, &t, "value type");
  if (rc) return gt_err_wrap(c->err, "key '%s'", kv->key);
  if (t >= GGUF_VT_COUNT)
    return gt_err_set(c->err, GT_EFORMAT, "key '%s': unknown value type %u at offset %zu", kv->key,
                      t, c->pos - 4);
  kv->type = (gguf_vtype_t)t;
  if (t == GGUF_VT_STRING) {
    rc = rd_str(c, &kv->off, &kv->len, "string value");
    return rc ? gt_err_wrap(c->err, "key '%s'", kv->key) : GT_OK;
  }
  if (t != GGUF_VT_ARRAY) {
    kv->off = c->pos;
    return skip_value(c, t, kv->key, 0);
  }
  uint32_t et = 0;
  size_t first;
  rc = skip_array(c, kv->key, 0, &et, &kv->len, &first);
  if (rc) return rc;
  kv->elem_type = (gguf_vtype_t)et;
  kv->off = first;
  if (et == GGUF_VT_STRING && kv->len > 0) {
    /* second walk over already-validated bytes builds the O(1) index */
    kv->str_off = malloc((size_t)kv->len * sizeof(size_t));
    if (!kv->str_off)
      return gt_err_set(c->err, GT_ENOMEM, "key '%s': out of memory indexing %llu strings",
                        kv->key, (unsigned long long)kv->len);
    size_t p = first;
    for (uint64_t k = 0; k < kv->len; k++) {
      uint64_t n;
      memcpy(&n, c->p + p, 8);
      kv->str_off[k] = p + 8;
      p += 8 + (size_t)n;
    }
  }
  return GT_OK;
}

static int parse_tensor(gguf_t *g, cur_t *c, int64_t i) {
  gguf_tensor_t *t = &g->tensors[i];
  char *name = NULL;
  int rc = copy_name(c, "tensor", i, &name);
  if (rc) return rc;
  t->name = name;
  uint32_t nd = 0;
  rc = rd_u32(c, &nd, "n_dims");
  if (rc) return gt_err_wrap(c->err, "tensor '%s'", name);
  if (nd == 0 || nd > GGUF_MAX_DIMS)
    return gt_err_set(c->err, GT_EFORMAT, "tensor '%s': n_dims %u not in 1..%d", name, nd,
                      GGUF_MAX_DIMS);
  t->n_dims = nd;
  for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
  for (uint32_t d = 0; d < nd; d++) {
    uint64_t v = 0;
    rc = rd_u64(c, &v, "dimension");
    if (rc) return gt_err_wrap(c->err, "tensor '%s'", name);
    if (v == 0 || v > (uint64_t)INT64_MAX)
      return gt_err_set(c->err, GT_EFORMAT, "tensor '%s': dimension %u is %lld (must be > 0)",
                        name, d, (long long)v);
    t->ne[d] = (int64_t)v;
  }
  uint32_t ty = 0;
  rc = rd_u32(c, &ty, "tensor type");
  if (rc) return gt_err_wrap(c->err, "tensor '%s'", name);
  if (!dt_known((int)ty))
    return gt_err_set(c->err, GT_EFORMAT, "tensor '%s': unknown tensor type %u", name, ty);
  t->type = (gt_type_t)ty;
  rc = rd_u64(c, &t->offset, "tensor offset");
  if (rc) return gt_err_wrap(c->err, "tensor '%s'", name);

  /* element count and byte size, overflow-safe */
  uint64_t nel = 1;
  for (int d = 0; d < GGUF_MAX_DIMS; d++) {
    if ((uint64_t)t->ne[d] > (uint64_t)INT64_MAX / nel)
      return gt_err_set(c->err, GT_EFORMAT, "tensor '%s': element count overflows", name);
    nel *= (uint64_t)t->ne[d];
  }
  int64_t be = dt_block_elems(t->type);
  if (t->ne[0] % be)
    return gt_err_set(c->err, GT_EFORMAT,
                      "tensor '%s': row length %lld is not a multiple of the %s block size %lld",
                      name, (long long)t->ne[0], dt_name(t->type), (long long)be);
  size_t rb = dt_row_bytes(t->type, t->ne[0]);
  uint64_t rows = nel / (uint64_t)t->ne[0];
  if (rb == 0 || rows > SIZE_MAX / rb)
    return gt_err_set(c->err, GT_EFORMAT, "tensor '%s': byte size overflows", name);
  t->nbytes = rb * (size_t)rows;
  return GT_OK;
}

typedef struct {
  uint64_t off;
  int64_t idx;
} span_t;

static int cmp_span(const void *a, const void *b) {
  uint64_t x = ((const span_t *)a)->off, y = ((const span_t *)b)->off;
  return x < y ? -1 : x > y;
}

/* Checks every tensor lies inside the data section, is aligned, and none overlap. */
static int check_tensor_layout(gguf_t *g, gt_err_t *err) {
  size_t data_size = g->size - g->data_off;
  for (int64_t i = 0; i < g->n_tensors; i++) {
    gguf_tensor_t *t = &g->tensors[i];
    if (t->offset % g->alignment)
      return gt_err_set(err, GT_EFORMAT, "tensor '%s': data offset %llu is not a multiple of the alignment %zu",
                        t->name, (unsigned long long)t->offset, g->alignment);
    if (t->offset > data_size || t->nbytes > data_size - t->offset)
      return gt_err_set(err, GT_EFORMAT,
                        "tensor '%s': data [%llu, +%zu) runs past end of file (data section is %zu bytes at file offset %zu)",
                        t->name, (unsigned long long)t->offset, t->nbytes, data_size, g->data_off);
    t->data = g->base + g->data_off + t->offset;
  }
  if (g->n_tensors < 2) return GT_OK;
  span_t *ord = malloc((size_t)g->n_tensors * sizeof *ord);
  if (!ord) return gt_err_set(err, GT_ENOMEM, "out of memory sorting tensors");
  for (int64_t i = 0; i < g->n_tensors; i++) ord[i] = (span_t){g->tensors[i].offset, i};
  qsort(ord, (size_t)g->n_tensors, sizeof *ord, cmp_span);
  int rc = GT_OK;
  for (int64_t i = 1; i < g->n_tensors; i++) {
    const gguf_tensor_t *a = &g->tensors[ord[i - 1].idx], *b = &g->tensors[ord[i].idx];
    if (b->offset - a->offset < a->nbytes) {
      rc = gt_err_set(err, GT_EFORMAT, "tensors '%s' [%llu, +%zu) and '%s' [%llu, +%zu) overlap",
                      a->name, (unsigned long long)a->offset, a->nbytes, b->name,
                      (unsigned long long)b->offset, b->nbytes);
      break;
    }
  }
  free(ord);
  return rc;
}

static int read_alignment(gguf_t *g, gt_err_t *err) {
  g->alignment = GGUF_DEFAULT_ALIGNMENT;
  int64_t i = gguf_find_key(g, "general.alignment");
  if (i < 0) return GT_OK;
  int64_t v = 0;
  if (g->kv[i].type != GGUF_VT_UINT32 && g->kv[i].type != GGUF_VT_UINT64 &&
      g->kv[i].type != GGUF_VT_INT32 && g->kv[i].type != GGUF_VT_INT64)
    return gt_err_set(err, GT_EFORMAT, "key 'general.alignment' has type %s, expected uint32",
                      vt_name(g->kv[i].type));
  if (gguf_get_int(g, "general.alignment", &v) || v <= 0 || (v & (v - 1)) ||
      v > (int64_t)MAX_ALIGNMENT)
    return gt_err_set(err, GT_EFORMAT, "key 'general.alignment' = %lld is not a power of two in 1..2^30",
                      (long long)v);
  g->alignment = (size_t)v;
  return GT_OK;
}

static int parse(gguf_t *g, gt_err_t *err) {
  cur_t c = {g->base, g->size, 0, err};
  uint32_t magic = 0, version = 0;
  int rc = rd_u32(&c, &magic, "magic");
  if (rc) return rc;
  if (magic != GGUF_MAGIC)
    return gt_err_set(err, GT_EFORMAT, "bad magic 0x%08x at offset 0 (not a GGUF file)", magic);
  if ((rc = rd_u32(&c, &version, "version"))) return rc;
  if (version == 1)
    return gt_err_set(err, GT_EUNSUPPORTED, "unsupported version 1 (GGUF v1 is obsolete; reconvert the model)");
  if (version == 0x02000000u || version == 0x03000000u)
    return gt_err_set(err, GT_EUNSUPPORTED, "unsupported big-endian GGUF (version field 0x%08x)", version);
  if (version != 2 && version != 3)
    return gt_err_set(err, GT_EUNSUPPORTED, "unsupported version %u (expected 2 or 3)", version);
  g->version = version;
  uint64_t nt = 0, nkv = 0;
  if ((rc = rd_u64(&c, &nt, "n_tensors"))) return rc;
  if ((rc = rd_u64(&c, &nkv, "n_kv"))) return rc;
  /* a kv is at least 8 (key length) + 1 (key) + 4 (type) + 1 (value) bytes; a tensor info at
   * least 8 + 1 + 4 + 8 + 4 + 8 */
  if (nkv > cur_left(&c) / 14)
    return gt_err_set(err, GT_EFORMAT, "n_kv %llu at offset 16 is too large for a %zu-byte file",
                      (unsigned long long)nkv, g->size);
  if (nt > cur_left(&c) / 33)
    return gt_err_set(err, GT_EFORMAT, "n_tensors %llu at offset 8 is too large for a %zu-byte file",
                      (unsigned long long)nt, g->size);

  g->kv = calloc(nkv ? (size_t)nkv : 1, sizeof *g->kv);
  g->kv_cap = hash_cap((int64_t)nkv);
  g->kv_hash = malloc(g->kv_cap * sizeof *g->kv_hash);
  if (!g->kv || !g->kv_hash) return gt_err_set(err, GT_ENOMEM, "out of memory for %llu keys", (unsigned long long)nkv);
  memset(g->kv_hash, 0xff, g->kv_cap * sizeof *g->kv_hash);
  for (uint64_t i = 0; i < nkv; i++) {
    g->n_kv = (int64_t)i + 1; /* so cleanup frees what was allocated */
    if ((rc = parse_kv(g, &c, (int64_t)i))) return rc;
    if (hash_insert(g, g->kv_hash, g->kv_cap, kv_name, (int64_t)i) >= 0)
      return gt_err_set(err, GT_EFORMAT, "duplicate key '%s' (key %llu)", g->kv[i].key,
                        (unsigned long long)i);
  }
  if ((rc = read_alignment(g, err))) return rc;

  g->tensors = calloc(nt ? (size_t)nt : 1, sizeof *g->tensors);
  g->t_cap = hash_cap((int64_t)nt);
  g->t_hash = malloc(g->t_cap * sizeof *g->t_hash);
  if (!g->tensors || !g->t_hash)
    return gt_err_set(err, GT_ENOMEM, "out of memory for %llu tensors", (unsigned long long)nt);
  memset(g->t_hash, 0xff, g->t_cap * sizeof *g->t_hash);
  for (uint64_t i = 0; i < nt; i++) {
    g->n_tensors = (int64_t)i + 1;
    if ((rc = parse_tensor(g, &c, (int64_t)i))) return rc;
    if (hash_insert(g, g->t_hash, g->t_cap, t_name, (int64_t)i) >= 0)
      return gt_err_set(err, GT_EFORMAT, "duplicate tensor name '%s' (tensor %llu)",
                        g->tensors[i].name, (unsigned long long)i);
  }

  /* data section starts at the next multiple of the alignment */
  size_t pad = (g->alignment - c.pos % g->alignment) % g->alignment;
  if (pad > cur_left(&c)) {
    if (nt > 0)
      return gt_err_set(err, GT_EFORMAT, "data section at offset %zu (after alignment) is past end of file (%zu bytes)",
                        c.pos + pad, g->size);
    pad = cur_left(&c); /* no tensors: a missing trailing pad is harmless */
  }
  g->data_off = c.pos + pad;
  if ((rc = check_tensor_layout(g, err))) return rc;

  int64_t ai = gguf_find_key(g, "general.architecture");
  if (ai >= 0 && g->kv[ai].type == GGUF_VT_STRING) {
    g->arch = malloc((size_t)g->kv[ai].len + 1);
    if (!g->arch) return gt_err_set(err, GT_ENOMEM, "out of memory");
    memcpy(g->arch, g->base + g->kv[ai].off, (size_t)g->kv[ai].len);
    g->arch[g->kv[ai].len] = 0;
  }
  return GT_OK;
}

void gguf_close(gguf_t *g) {
  if (!g) return;
  if (g->kv)
    for (int64_t i = 0; i < g->n_kv; i++) {
      free(g->kv[i].key);
      free(g->kv[i].str_off);
    }
  if (g->tensors)
    for (int64_t i = 0; i < g->n_tensors; i++) free((char *)g->tensors[i].name);
  free(g->kv);
  free(g->tensors);
  free(g->kv_hash);
  free(g->t_hash);
  free(g->arch);
  if (g->mapped && g->base) munmap((void *)g->base, g->size);
  free(g);
}

/* Parses g; on failure frees g (and its mapping). A local error record keeps the codes right
 * when the caller passes err = NULL (gt_err_wrap needs a record). */
static int open_common(gguf_t *g, gguf_t **out, gt_err_t *err) {
  gt_err_t local = {0};
  int rc = parse(g, &local);
  if (rc) {
    gguf_close(g);
    if (err) *err = local;
    return rc;
  }
  *out = g;
  return GT_OK;
}

int gguf_open_buffer(const void *buf, size_t len, gguf_t **out, gt_err_t *err) {
  if (!out || (!buf && len)) return gt_err_set(err, GT_EINVAL, "gguf_open_buffer: bad arguments");
  *out = NULL;
  gguf_t *g = calloc(1, sizeof *g);
  if (!g) return gt_err_set(err, GT_ENOMEM, "out of memory");
  g->base = buf;
  g->size = len;
  return open_common(g, out, err);
}

int gguf_open(const char *path, gguf_t **out, gt_err_t *err) {
  if (!path || !out) return gt_err_set(err, GT_EINVAL, "gguf_open: bad arguments");
  *out = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return gt_err_set(err, GT_EIO, "%s: open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return gt_err_set(err, GT_EIO, "%s: stat: %s", path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return gt_err_set(err, GT_EIO, "%s: not a regular file", path);
  }
  if (st.st_size < 24) {
    close(fd);
    return gt_err_set(err, GT_EFORMAT, "%s: file of %lld bytes is too small for a GGUF header",
                      path, (long long)st.st_size);
  }
  if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX) {
    close(fd);
    return gt_err_set(err, GT_EUNSUPPORTED, "%s: file too large to map", path);
  }
  size_t size = (size_t)st.st_size;
  void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  close(fd);
  if (p == MAP_FAILED) return gt_err_set(err, GT_EIO, "%s: mmap: %s", path, strerror(e));
  gguf_t *g = calloc(1, sizeof *g);
  if (!g) {
    munmap(p, size);
    return gt_err_set(err, GT_ENOMEM, "out of memory");
  }
  g->base = p;
  g->size = size;
  g->mapped = 1;
  int rc = open_common(g, out, err);
  if (rc && err) gt_err_wrap(err, "%s", path);
  return rc;
}

/* ---------------------------------------------------------------- accessors */

uint32_t gguf_version(const gguf_t *g) { return g->version; }
size_t gguf_alignment(const gguf_t *g) { return g->alignment; }
size_t gguf_file_size(const gguf_t *g) { return g->size; }
size_t gguf_data_offset(const gguf_t *g) { return g->data_off; }
int64_t gguf_n_kv(const gguf_t *g) { return g->n_kv; }

const char *gguf_key(const gguf_t *g, int64_t i) {
  return i >= 0 && i < g->n_kv ? g->kv[i].key : NULL;
}

gguf_vtype_t gguf_kv_type(const gguf_t *g, int64_t i) {
  return i >= 0 && i < g->n_kv ? g->kv[i].type : GGUF_VT_COUNT;
}

int64_t gguf_find_key(const gguf_t *g, const char *key) {
  return hash_find(g, g->kv_hash, g->kv_cap, kv_name, key);
}

static const kv_t *find_kv(const gguf_t *g, const char *key) {
  int64_t i = gguf_find_key(g, key);
  return i < 0 ? NULL : &g->kv[i];
}

static int is_int_type(gguf_vtype_t t) {
  return t == GGUF_VT_UINT8 || t == GGUF_VT_INT8 || t == GGUF_VT_UINT16 || t == GGUF_VT_INT16 ||
         t == GGUF_VT_UINT32 || t == GGUF_VT_INT32 || t == GGUF_VT_UINT64 ||
         t == GGUF_VT_INT64 || t == GGUF_VT_BOOL;
}

/* Reads a scalar integer of type t at p. GT_EFORMAT if a uint64 does not fit int64. */
static int load_int(gguf_vtype_t t, const uint8_t *p, int64_t *out) {
  switch (t) {
    case GGUF_VT_UINT8: case GGUF_VT_BOOL: *out = p[0]; return GT_OK;
    case GGUF_VT_INT8: *out = (int8_t)p[0]; return GT_OK;
    case GGUF_VT_UINT16: { uint16_t v; memcpy(&v, p, 2); *out = v; return GT_OK; }
    case GGUF_VT_INT16: { int16_t v; memcpy(&v, p, 2); *out = v; return GT_OK; }
    case GGUF_VT_UINT32: { uint32_t v; memcpy(&v, p, 4); *out = v; return GT_OK; }
    case GGUF_VT_INT32: { int32_t v; memcpy(&v, p, 4); *out = v; return GT_OK; }
    case GGUF_VT_INT64: { int64_t v; memcpy(&v, p, 8); *out = v; return GT_OK; }
    case GGUF_VT_UINT64: {
      uint64_t v = 0;
      memcpy(&v, p, 8);
      if (v > (uint64_t)INT64_MAX) return GT_EFORMAT;
      *out = (int64_t)v;
      return GT_OK;
    }
    default: return GT_EFORMAT;
  }
}

static int load_float(gguf_vtype_t t, const uint8_t *p, double *out) {
  if (t == GGUF_VT_FLOAT32) { float v; memcpy(&v, p, 4); *out = v; return GT_OK; }
  if (t == GGUF_VT_FLOAT64) { double v; memcpy(&v, p, 8); *out = v; return GT_OK; }
  if (t == GGUF_VT_UINT64) { uint64_t v; memcpy(&v, p, 8); *out = (double)v; return GT_OK; }
  int64_t i;
  if (!is_int_type(t) || load_int(t, p, &i)) return GT_EFORMAT;
  *out = (double)i;
  return GT_OK;
}

int gguf_get_int(const gguf_t *g, const char *key, int64_t *out) {
  const kv_t *kv = find_kv(g, key);
  if (!kv) return GT_ENOTFOUND;
  if (!is_int_type(kv->type)) return GT_EFORMAT;
  return load_int(kv->type, g->base + kv->off, out);
}

int gguf_get_float(const gguf_t *g, const char *key, double *out) {
  const kv_t *kv = find_kv(g, key);
  if (!kv) return GT_ENOTFOUND;
  return load_float(kv->type, g->base + kv->off, out);
}

int gguf_get_bool(const gguf_t *g, const char *key, int *out) {
  const kv_t *kv = find_kv(g, key);
  if (!kv) return GT_ENOTFOUND;
  if (kv->type != GGUF_VT_BOOL) return GT_EFORMAT;
  *out = g->base[kv->off] != 0;
  return GT_OK;
}

int gguf_get_str(const gguf_t *g, const char *key, const char **s, size_t *len) {
  const kv_t *kv = find_kv(g, key);
  if (!kv) return GT_ENOTFOUND;
  if (kv->type != GGUF_VT_STRING) return GT_EFORMAT;
  *s = (const char *)g->base + kv->off;
  *len = (size_t)kv->len;
  return GT_OK;
}

int gguf_get_arr(const gguf_t *g, const char *key, gguf_vtype_t *elem_type, uint64_t *n) {
  const kv_t *kv = find_kv(g, key);
  if (!kv) return GT_ENOTFOUND;
  if (kv->type != GGUF_VT_ARRAY) return GT_EFORMAT;
  if (elem_type) *elem_type = kv->elem_type;
  if (n) *n = kv->len;
  return GT_OK;
}

const void *gguf_arr_data(const gguf_t *g, const char *key) {
  const kv_t *kv = find_kv(g, key);
  if (!kv || kv->type != GGUF_VT_ARRAY || !vt_size(kv->elem_type)) return NULL;
  return g->base + kv->off;
}

/* The numeric array under key with element i, or an error code. */
static int arr_elem(const gguf_t *g, const char *key, uint64_t i, const kv_t **kvo,
                    const uint8_t **p) {
  const kv_t *kv = find_kv(g, key);
  if (!kv) return GT_ENOTFOUND;
  if (kv->type != GGUF_VT_ARRAY || !vt_size(kv->elem_type)) return GT_EFORMAT;
  if (i >= kv->len) return GT_ERANGE;
  *kvo = kv;
  *p = g->base + kv->off + (size_t)i * vt_size(kv->elem_type);
  return GT_OK;
}

int gguf_arr_int(const gguf_t *g, const char *key, uint64_t i, int64_t *out) {
  const kv_t *kv;
  const uint8_t *p;
  int rc = arr_elem(g, key, i, &kv, &p);
  if (rc) return rc;
  if (!is_int_type(kv->elem_type)) return GT_EFORMAT;
  return load_int(kv->elem_type, p, out);
}

int gguf_arr_float(const gguf_t *g, const char *key, uint64_t i, double *out) {
  const kv_t *kv;
  const uint8_t *p;
  int rc = arr_elem(g, key, i, &kv, &p);
  if (rc) return rc;
  return load_float(kv->elem_type, p, out);
}

int gguf_arr_str(const gguf_t *g, const char *key, uint64_t i, const char **s, size_t *len) {
  const kv_t *kv = find_kv(g, key);
  if (!kv) return GT_ENOTFOUND;
  if (kv->type != GGUF_VT_ARRAY || kv->elem_type != GGUF_VT_STRING) return GT_EFORMAT;
  if (i >= kv->len) return GT_ERANGE;
  size_t off = kv->str_off[i];
  uint64_t n;
  memcpy(&n, g->base + off - 8, 8);
  *s = (const char *)g->base + off;
  *len = (size_t)n;
  return GT_OK;
}

int64_t gguf_n_tensors(const gguf_t *g) { return g->n_tensors; }

const gguf_tensor_t *gguf_tensor(const gguf_t *g, int64_t i) {
  return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const gguf_tensor_t *gguf_find_tensor(const gguf_t *g, const char *name) {
  int64_t i = hash_find(g, g->t_hash, g->t_cap, t_name, name);
  return i < 0 ? NULL : &g->tensors[i];
}

const char *gguf_arch(const gguf_t *g) { return g->arch; }
