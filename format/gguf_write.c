/* format/gguf_write.c — streaming GGUF v3 writer (see gguf_write.h). */
#include "format/gguf_write.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GW_NAME_MAX 64 /* ggml's GGML_MAX_NAME, including the NUL */

typedef struct {
  char *name;
  uint32_t n_dims;
  int64_t ne[GGUF_MAX_DIMS];
  gt_type_t type;
  uint64_t offset; /* relative to the data section */
  uint64_t nbytes;
} gw_tinfo_t;

typedef enum { GW_META, GW_DATA, GW_DONE } gw_phase_t;

struct gw {
  FILE *f;           /* NULL for a layout-only writer */
  char *path;
  gw_phase_t phase;
  int failed;        /* an I/O error happened: every later call fails */
  /* metadata, serialized as it will appear in the file */
  uint8_t *kv;
  size_t kv_len, kv_cap;
  char **keys;
  int64_t n_kv, cap_keys;
  uint64_t arr_left; /* strings still expected by an incremental string array */
  size_t arr_mark;   /* kv_len before that array's key (to roll it back on error) */
  size_t align;
  gw_tinfo_t *t;
  int64_t n_t, cap_t;
  uint64_t data_bytes; /* running end of the data section (aligned) */
  /* data phase */
  int64_t cur;       /* tensor being written */
  uint64_t cur_done; /* bytes written into it */
  char *iobuf;
};

static const size_t k_vsize[GGUF_VT_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static int need_meta(gw_t *w, gt_err_t *err) {
  if (!w) return gt_err_set(err, GT_EINVAL, "gguf writer: NULL writer");
  if (w->failed) return gt_err_set(err, GT_EIO, "gguf writer: an earlier write failed");
  if (w->phase != GW_META)
    return gt_err_set(err, GT_EINVAL, "gguf writer: metadata and tensors must come before data");
  if (w->arr_left)
    return gt_err_set(err, GT_EINVAL, "gguf writer: string array still expects %llu strings",
                      (unsigned long long)w->arr_left);
  return GT_OK;
}

static int kv_reserve(gw_t *w, size_t more, gt_err_t *err) {
  if (w->kv_len + more <= w->kv_cap) return GT_OK;
  size_t cap = w->kv_cap ? w->kv_cap : 4096;
  while (cap < w->kv_len + more) cap *= 2;
  uint8_t *p = realloc(w->kv, cap);
  if (!p) return gt_err_set(err, GT_ENOMEM, "gguf writer: out of memory for metadata");
  w->kv = p;
  w->kv_cap = cap;
  return GT_OK;
}

static int kv_put(gw_t *w, const void *p, size_t n, gt_err_t *err) {
  int rc = kv_reserve(w, n, err);
  if (rc) return rc;
  if (n) memcpy(w->kv + w->kv_len, p, n);
  w->kv_len += n;
  return GT_OK;
}

static int kv_put_u32(gw_t *w, uint32_t v, gt_err_t *err) { return kv_put(w, &v, 4, err); }
static int kv_put_u64(gw_t *w, uint64_t v, gt_err_t *err) { return kv_put(w, &v, 8, err); }

static int kv_put_str(gw_t *w, const char *s, size_t len, gt_err_t *err) {
  int rc = kv_put_u64(w, (uint64_t)len, err);
  return rc ? rc : kv_put(w, s, len, err);
}

/* Validates key, records it and serializes "key, value type". */
static int kv_begin(gw_t *w, const char *key, gguf_vtype_t vt, gt_err_t *err) {
  int rc = need_meta(w, err);
  if (rc) return rc;
  if (!key || !key[0]) return gt_err_set(err, GT_EINVAL, "gguf writer: empty key");
  if (gw_has_key(w, key)) return gt_err_set(err, GT_EINVAL, "gguf writer: duplicate key '%s'", key);
  if (w->n_kv == w->cap_keys) {
    int64_t cap = w->cap_keys ? w->cap_keys * 2 : 32;
    char **k = realloc(w->keys, (size_t)cap * sizeof *k);
    if (!k) return gt_err_set(err, GT_ENOMEM, "gguf writer: out of memory");
    w->keys = k;
    w->cap_keys = cap;
  }
  char *copy = strdup(key);
  if (!copy) return gt_err_set(err, GT_ENOMEM, "gguf writer: out of memory");
  size_t mark = w->kv_len;
  if ((rc = kv_put_str(w, key, strlen(key), err)) || (rc = kv_put_u32(w, (uint32_t)vt, err))) {
    w->kv_len = mark;
    free(copy);
    return rc;
  }
  w->keys[w->n_kv++] = copy;
  return GT_OK;
}

static int kv_scalar(gw_t *w, const char *key, gguf_vtype_t vt, const void *v, gt_err_t *err) {
  int rc = kv_begin(w, key, vt, err);
  return rc ? rc : kv_put(w, v, k_vsize[vt], err);
}

/* Integer keys: "general.alignment" is validated first and applied once written. */
static int kv_int(gw_t *w, const char *key, gguf_vtype_t vt, const void *v, int64_t iv,
                  gt_err_t *err) {
  const int is_align = w && key && strcmp(key, "general.alignment") == 0;
  if (is_align) {
    if (iv <= 0 || (iv & (iv - 1)) || iv > ((int64_t)1 << 30))
      return gt_err_set(err, GT_EINVAL, "gguf writer: general.alignment %lld is not a power of two",
                        (long long)iv);
    if (w->n_t) return gt_err_set(err, GT_EINVAL, "gguf writer: general.alignment set after tensors");
  }
  int rc = kv_scalar(w, key, vt, v, err);
  if (!rc && is_align) w->align = (size_t)iv;
  return rc;
}

int gw_kv_u8(gw_t *w, const char *key, uint8_t v, gt_err_t *err) {
  return kv_int(w, key, GGUF_VT_UINT8, &v, v, err);
}
int gw_kv_i8(gw_t *w, const char *key, int8_t v, gt_err_t *err) {
  return kv_int(w, key, GGUF_VT_INT8, &v, v, err);
}
int gw_kv_u16(gw_t *w, const char *key, uint16_t v, gt_err_t *err) {
  return kv_int(w, key, GGUF_VT_UINT16, &v, v, err);
}
int gw_kv_i16(gw_t *w, const char *key, int16_t v, gt_err_t *err) {
  return kv_int(w, key, GGUF_VT_INT16, &v, v, err);
}
int gw_kv_u32(gw_t *w, const char *key, uint32_t v, gt_err_t *err) {
  return kv_int(w, key, GGUF_VT_UINT32, &v, v, err);
}
int gw_kv_i32(gw_t *w, const char *key, int32_t v, gt_err_t *err) {
  return kv_int(w, key, GGUF_VT_INT32, &v, v, err);
}
int gw_kv_u64(gw_t *w, const char *key, uint64_t v, gt_err_t *err) {
  return kv_int(w, key, GGUF_VT_UINT64, &v, v > (uint64_t)INT64_MAX ? -1 : (int64_t)v, err);
}
int gw_kv_i64(gw_t *w, const char *key, int64_t v, gt_err_t *err) {
  return kv_int(w, key, GGUF_VT_INT64, &v, v, err);
}
int gw_kv_f32(gw_t *w, const char *key, float v, gt_err_t *err) {
  return kv_scalar(w, key, GGUF_VT_FLOAT32, &v, err);
}
int gw_kv_f64(gw_t *w, const char *key, double v, gt_err_t *err) {
  return kv_scalar(w, key, GGUF_VT_FLOAT64, &v, err);
}
int gw_kv_bool(gw_t *w, const char *key, int v, gt_err_t *err) {
  uint8_t b = v ? 1 : 0;
  return kv_scalar(w, key, GGUF_VT_BOOL, &b, err);
}

int gw_kv_str(gw_t *w, const char *key, const char *s, size_t len, gt_err_t *err) {
  if (!s && len) return gt_err_set(err, GT_EINVAL, "gguf writer: key '%s': NULL string", key);
  int rc = kv_begin(w, key, GGUF_VT_STRING, err);
  return rc ? rc : kv_put_str(w, s, len, err);
}

int gw_kv_arr(gw_t *w, const char *key, gguf_vtype_t et, const void *data, uint64_t n,
              gt_err_t *err) {
  if ((int)et < 0 || et >= GGUF_VT_COUNT || et == GGUF_VT_STRING || et == GGUF_VT_ARRAY)
    return gt_err_set(err, GT_EINVAL, "gguf writer: key '%s': bad array element type %d",
                      key ? key : "", (int)et);
  if (!data && n) return gt_err_set(err, GT_EINVAL, "gguf writer: key '%s': NULL array", key);
  if (n > (uint64_t)1 << 40) return gt_err_set(err, GT_EINVAL, "gguf writer: key '%s': array too long", key);
  int rc = kv_begin(w, key, GGUF_VT_ARRAY, err);
  if (rc) return rc;
  if ((rc = kv_put_u32(w, (uint32_t)et, err)) || (rc = kv_put_u64(w, n, err))) return rc;
  return kv_put(w, data, (size_t)n * k_vsize[et], err);
}

/* Drops the string array being written (its key included). */
static void arr_rollback(gw_t *w) {
  w->kv_len = w->arr_mark;
  free(w->keys[--w->n_kv]);
  w->arr_left = 0;
}

int gw_kv_arr_str_begin(gw_t *w, const char *key, uint64_t n, gt_err_t *err) {
  size_t mark = w ? w->kv_len : 0;
  int rc = kv_begin(w, key, GGUF_VT_ARRAY, err);
  if (rc) return rc;
  w->arr_mark = mark;
  if ((rc = kv_put_u32(w, (uint32_t)GGUF_VT_STRING, err)) || (rc = kv_put_u64(w, n, err))) {
    arr_rollback(w);
    return rc;
  }
  w->arr_left = n;
  return GT_OK;
}

int gw_kv_arr_str_add(gw_t *w, const char *s, size_t len, gt_err_t *err) {
  if (!w) return gt_err_set(err, GT_EINVAL, "gguf writer: NULL writer");
  if (!w->arr_left) return gt_err_set(err, GT_EINVAL, "gguf writer: no string array is open");
  int rc = (!s && len) ? gt_err_set(err, GT_EINVAL, "gguf writer: NULL string") : kv_put_str(w, s, len, err);
  if (rc) {
    arr_rollback(w); /* the whole array is dropped: the writer stays consistent */
    return rc;
  }
  w->arr_left--;
  return GT_OK;
}

int gw_kv_arr_str(gw_t *w, const char *key, const char *const *strs, const size_t *lens,
                  uint64_t n, gt_err_t *err) {
  if (!strs && n) return gt_err_set(err, GT_EINVAL, "gguf writer: key '%s': NULL strings", key);
  for (uint64_t i = 0; i < n; i++)
    if (!strs[i])
      return gt_err_set(err, GT_EINVAL, "gguf writer: key '%s': string %llu is NULL", key,
                        (unsigned long long)i);
  int rc = gw_kv_arr_str_begin(w, key, n, err);
  for (uint64_t i = 0; !rc && i < n; i++)
    rc = gw_kv_arr_str_add(w, strs[i], lens ? lens[i] : strlen(strs[i]), err);
  return rc;
}

int64_t gw_n_kv(const gw_t *w) { return w ? w->n_kv : 0; }

int gw_has_key(const gw_t *w, const char *key) {
  if (!w || !key) return 0;
  for (int64_t i = 0; i < w->n_kv; i++)
    if (strcmp(w->keys[i], key) == 0) return 1;
  return 0;
}

int gw_tensor(gw_t *w, const char *name, uint32_t n_dims, const int64_t *ne, gt_type_t type,
              gt_err_t *err) {
  int rc = need_meta(w, err);
  if (rc) return rc;
  if (!name || !name[0]) return gt_err_set(err, GT_EINVAL, "gguf writer: empty tensor name");
  if (strlen(name) >= GW_NAME_MAX)
    return gt_err_set(err, GT_EINVAL, "gguf writer: tensor name '%s' longer than %d bytes", name,
                      GW_NAME_MAX - 1);
  if (n_dims < 1 || n_dims > GGUF_MAX_DIMS || !ne)
    return gt_err_set(err, GT_EINVAL, "gguf writer: tensor %s: %u dims", name, n_dims);
  if (!dt_known((int)type) || dt_block_elems(type) <= 0)
    return gt_err_set(err, GT_EINVAL, "gguf writer: tensor %s: unknown type %d", name, (int)type);
  for (int64_t i = 0; i < w->n_t; i++)
    if (strcmp(w->t[i].name, name) == 0)
      return gt_err_set(err, GT_EINVAL, "gguf writer: duplicate tensor '%s'", name);
  gw_tinfo_t ti = {0};
  ti.n_dims = n_dims;
  ti.type = type;
  uint64_t nel = 1;
  for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
    ti.ne[d] = d < n_dims ? ne[d] : 1;
    if (ti.ne[d] < 1 || ti.ne[d] > ((int64_t)1 << 40))
      return gt_err_set(err, GT_EINVAL, "gguf writer: tensor %s: dim %u = %lld", name, d,
                        (long long)ti.ne[d]);
    if (nel > ((uint64_t)1 << 50) / (uint64_t)ti.ne[d])
      return gt_err_set(err, GT_EINVAL, "gguf writer: tensor %s: too many elements", name);
    nel *= (uint64_t)ti.ne[d];
  }
  size_t row = dt_row_bytes(type, ti.ne[0]);
  if (!row)
    return gt_err_set(err, GT_EINVAL, "gguf writer: tensor %s: row of %lld not a multiple of %s's block of %lld",
                      name, (long long)ti.ne[0], dt_name(type), (long long)dt_block_elems(type));
  ti.nbytes = (uint64_t)row * (nel / (uint64_t)ti.ne[0]);
  ti.offset = w->data_bytes;
  if (w->n_t == w->cap_t) {
    int64_t cap = w->cap_t ? w->cap_t * 2 : 64;
    gw_tinfo_t *t = realloc(w->t, (size_t)cap * sizeof *t);
    if (!t) return gt_err_set(err, GT_ENOMEM, "gguf writer: out of memory");
    w->t = t;
    w->cap_t = cap;
  }
  ti.name = strdup(name);
  if (!ti.name) return gt_err_set(err, GT_ENOMEM, "gguf writer: out of memory");
  w->t[w->n_t++] = ti;
  w->data_bytes = align_up(ti.offset + ti.nbytes, w->align);
  return GT_OK;
}

int64_t gw_n_tensors(const gw_t *w) { return w ? w->n_t : 0; }
uint64_t gw_tensor_offset(const gw_t *w, int64_t i) {
  return (w && i >= 0 && i < w->n_t) ? w->t[i].offset : 0;
}
uint64_t gw_tensor_nbytes(const gw_t *w, int64_t i) {
  return (w && i >= 0 && i < w->n_t) ? w->t[i].nbytes : 0;
}
size_t gw_alignment(const gw_t *w) { return w ? w->align : GGUF_DEFAULT_ALIGNMENT; }
uint64_t gw_data_bytes(const gw_t *w) { return w ? w->data_bytes : 0; }

static uint64_t header_raw(const gw_t *w) {
  uint64_t n = 4 + 4 + 8 + 8 + w->kv_len;
  for (int64_t i = 0; i < w->n_t; i++) n += 8 + strlen(w->t[i].name) + 4 + 8 * w->t[i].n_dims + 4 + 8;
  return n;
}

uint64_t gw_header_bytes(const gw_t *w) { return w ? align_up(header_raw(w), w->align) : 0; }

int gw_create(const char *path, gw_t **out, gt_err_t *err) {
  if (!out) return gt_err_set(err, GT_EINVAL, "gguf writer: NULL out");
  *out = NULL;
  gw_t *w = calloc(1, sizeof *w);
  if (!w) return gt_err_set(err, GT_ENOMEM, "gguf writer: out of memory");
  w->align = GGUF_DEFAULT_ALIGNMENT;
  if (path) {
    w->path = strdup(path);
    w->iobuf = malloc(1 << 20);
    if (!w->path || !w->iobuf) {
      gw_free(w);
      return gt_err_set(err, GT_ENOMEM, "gguf writer: out of memory");
    }
    w->f = fopen(path, "wb");
    if (!w->f) {
      int e = errno;
      gw_free(w);
      return gt_err_set(err, GT_EIO, "cannot create %s: %s", path, strerror(e));
    }
    setvbuf(w->f, w->iobuf, _IOFBF, 1 << 20);
  }
  *out = w;
  return GT_OK;
}

void gw_free(gw_t *w) {
  if (!w) return;
  if (w->f) fclose(w->f);
  for (int64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
  for (int64_t i = 0; i < w->n_t; i++) free(w->t[i].name);
  free(w->keys);
  free(w->t);
  free(w->kv);
  free(w->iobuf);
  free(w->path);
  free(w);
}

static int fwrite_all(gw_t *w, const void *p, size_t n, gt_err_t *err) {
  if (n && fwrite(p, 1, n, w->f) != n) {
    int e = errno;
    w->failed = 1;
    return gt_err_set(err, GT_EIO, "write to %s failed: %s", w->path, strerror(e ? e : EIO));
  }
  return GT_OK;
}

static int write_zeros(gw_t *w, uint64_t n, gt_err_t *err) {
  static const char z[256];
  while (n) {
    size_t k = n < sizeof z ? (size_t)n : sizeof z;
    int rc = fwrite_all(w, z, k, err);
    if (rc) return rc;
    n -= k;
  }
  return GT_OK;
}

int gw_begin_data(gw_t *w, gt_err_t *err) {
  int rc = need_meta(w, err);
  if (rc) return rc;
  if (!w->f) return gt_err_set(err, GT_EINVAL, "gguf writer: layout-only writer has no file");
  uint32_t magic_ver[2] = {0x46554747u /* "GGUF" */, 3};
  uint64_t counts[2] = {(uint64_t)w->n_t, (uint64_t)w->n_kv};
  if ((rc = fwrite_all(w, magic_ver, 8, err)) || (rc = fwrite_all(w, counts, 16, err)) ||
      (rc = fwrite_all(w, w->kv, w->kv_len, err)))
    return rc;
  for (int64_t i = 0; i < w->n_t; i++) {
    const gw_tinfo_t *t = &w->t[i];
    uint64_t len = strlen(t->name);
    uint32_t nd = t->n_dims, ty = (uint32_t)t->type;
    if ((rc = fwrite_all(w, &len, 8, err)) || (rc = fwrite_all(w, t->name, len, err)) ||
        (rc = fwrite_all(w, &nd, 4, err)) || (rc = fwrite_all(w, t->ne, 8 * nd, err)) ||
        (rc = fwrite_all(w, &ty, 4, err)) || (rc = fwrite_all(w, &t->offset, 8, err)))
      return rc;
  }
  uint64_t raw = header_raw(w);
  if ((rc = write_zeros(w, align_up(raw, w->align) - raw, err))) return rc;
  w->phase = GW_DATA;
  w->cur = 0;
  w->cur_done = 0;
  return GT_OK;
}

int64_t gw_current_tensor(const gw_t *w) { return w ? w->cur : 0; }

/* After a tensor is complete: pad to the alignment and move on. */
static int close_tensor(gw_t *w, gt_err_t *err) {
  const gw_tinfo_t *t = &w->t[w->cur];
  uint64_t end = t->offset + t->nbytes;
  int rc = write_zeros(w, align_up(end, w->align) - end, err);
  if (rc) return rc;
  w->cur++;
  w->cur_done = 0;
  return GT_OK;
}

int gw_write(gw_t *w, const void *data, size_t len, gt_err_t *err) {
  if (!w) return gt_err_set(err, GT_EINVAL, "gguf writer: NULL writer");
  if (w->failed) return gt_err_set(err, GT_EIO, "gguf writer: an earlier write failed");
  if (w->phase != GW_DATA)
    return gt_err_set(err, GT_EINVAL, "gguf writer: tensor data before gw_begin_data()");
  if (!data && len) return gt_err_set(err, GT_EINVAL, "gguf writer: NULL data");
  if (w->cur >= w->n_t)
    return gt_err_set(err, GT_EINVAL, "gguf writer: %zu bytes written after the last tensor", len);
  const gw_tinfo_t *t = &w->t[w->cur];
  uint64_t left = t->nbytes - w->cur_done;
  if (len > left)
    return gt_err_set(err, GT_EINVAL, "gguf writer: tensor %s: write of %zu bytes exceeds its size (%llu left of %llu)",
                      t->name, len, (unsigned long long)left, (unsigned long long)t->nbytes);
  int rc = fwrite_all(w, data, len, err);
  if (rc) return rc;
  w->cur_done += len;
  if (w->cur_done == t->nbytes) return close_tensor(w, err);
  return GT_OK;
}

int gw_finish(gw_t *w, gt_err_t *err) {
  if (!w) return gt_err_set(err, GT_EINVAL, "gguf writer: NULL writer");
  int rc = GT_OK;
  if (w->failed) {
    rc = gt_err_set(err, GT_EIO, "gguf writer: an earlier write to %s failed", w->path);
  } else if (!w->f) {
    rc = gt_err_set(err, GT_EINVAL, "gguf writer: layout-only writer has no file to finish");
  } else if (w->phase == GW_META) {
    rc = gt_err_set(err, GT_EINVAL, "gguf writer: gw_finish() before gw_begin_data()");
  } else if (w->cur < w->n_t) {
    rc = gt_err_set(err, GT_EINVAL, "gguf writer: tensor %s incomplete (%llu of %llu bytes), %lld tensors missing",
                    w->t[w->cur].name, (unsigned long long)w->cur_done,
                    (unsigned long long)w->t[w->cur].nbytes, (long long)(w->n_t - w->cur));
  }
  if (w->f) {
    FILE *f = w->f;
    w->f = NULL;
    int bad = fflush(f) != 0;
    int e = errno;
    if (fclose(f) != 0 && !bad) {
      bad = 1;
      e = errno;
    }
    if (bad && rc == GT_OK) rc = gt_err_set(err, GT_EIO, "write to %s failed: %s", w->path, strerror(e));
  }
  w->phase = GW_DONE;
  gw_free(w);
  return rc;
}
