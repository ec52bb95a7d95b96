/* tests/unit/test_gguf.c — the GGUF reader against every golden file (metadata, tensor shapes
 * and types from manifest.json), a corpus of corrupt images derived from a small valid image
 * built here, and a replay of tests/fuzz/regress/gguf/.
 *
 * `test_gguf --write-seeds DIR` writes the built images to DIR (fuzzer seed corpus). */
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cmocka.h>

#include "format/gguf.h"
#include "tests/common/testutil.h"

/* ------------------------------------------------------------ image builder */

typedef struct {
  uint8_t *p;
  size_t len, cap;
} buf_t;

static void put(buf_t *b, const void *src, size_t n) {
  if (b->len + n > b->cap) {
    b->cap = (b->len + n) * 2 + 256;
    b->p = realloc(b->p, b->cap);
    assert_non_null(b->p);
  }
  memcpy(b->p + b->len, src, n);
  b->len += n;
}
static size_t put_u8(buf_t *b, uint8_t v) { size_t at = b->len; put(b, &v, 1); return at; }
static size_t put_u16(buf_t *b, uint16_t v) { size_t at = b->len; put(b, &v, 2); return at; }
static size_t put_u32(buf_t *b, uint32_t v) { size_t at = b->len; put(b, &v, 4); return at; }
static size_t put_u64(buf_t *b, uint64_t v) { size_t at = b->len; put(b, &v, 8); return at; }
static size_t put_f32(buf_t *b, float v) { size_t at = b->len; put(b, &v, 4); return at; }
static size_t put_f64(buf_t *b, double v) { size_t at = b->len; put(b, &v, 8); return at; }
/* returns the offset of the u64 length */
static size_t put_str(buf_t *b, const char *s) {
  size_t at = put_u64(b, strlen(s));
  put(b, s, strlen(s));
  return at;
}
/* key + type; returns the offset of the type field */
static size_t put_key(buf_t *b, const char *k, uint32_t type, size_t *key_at) {
  size_t at = put_str(b, k);
  if (key_at) *key_at = at;
  return put_u32(b, type);
}

#define NT 3
/* Offsets of the fields the corruption tests patch. */
typedef struct {
  size_t version, n_tensors, n_kv;
  size_t name_len;             /* value length of general.name */
  size_t u32_type;             /* value type of test.u32 */
  size_t i8_key;               /* key length field of test.i8 */
  size_t bool_val;             /* value of test.bool */
  size_t arr_type, arr_len;    /* test.arr_u32 */
  size_t tok_len0, tok_len3;   /* lengths of tokens[0] and tokens[3] */
  size_t nested_inner_type;    /* element type of test.nested[0] */
  size_t align_type, align_val;
  size_t t_name[NT], t_ndims[NT], t_dim[NT][2], t_type[NT], t_off[NT];
  size_t data;
} layout_t;

typedef struct {
  uint32_t version;
  int with_alignment;
  const uint32_t *types; /* NULL: F32, Q8_0, Q4_K with known contents; else 3 ggml type ids */
} build_opts_t;

static const char *k_tnames[NT] = {"t.a0", "t.b0", "t.c0"}; /* same length: renames in place */

/* A complete, valid GGUF: every value type, arrays (numeric, bool, string, nested, empty),
 * three tensors (F32 8x2 at 0, Q8_0 64x2 at 64, Q4_K 256 at 224) ending exactly at EOF. */
static buf_t build_image(build_opts_t o, layout_t *L) {
  buf_t b = {0};
  layout_t l = {0};
  put_u32(&b, 0x46554747u);
  l.version = put_u32(&b, o.version);
  l.n_tensors = put_u64(&b, NT);
  l.n_kv = put_u64(&b, 0); /* patched below */
  uint64_t nkv = 0;
  put_key(&b, "general.architecture", 8, NULL); put_str(&b, "qwen3"); nkv++;
  put_key(&b, "general.name", 8, NULL); l.name_len = put_str(&b, "tiny test"); nkv++;
  if (o.with_alignment) {
    l.align_type = put_key(&b, "general.alignment", 4, NULL);
    l.align_val = put_u32(&b, 32);
    nkv++;
  }
  put_key(&b, "test.u8", 0, NULL); put_u8(&b, 200); nkv++;
  put_key(&b, "test.i8", 1, &l.i8_key); put_u8(&b, (uint8_t)(int8_t)-100); nkv++;
  put_key(&b, "test.u16", 2, NULL); put_u16(&b, 60000); nkv++;
  put_key(&b, "test.i16", 3, NULL); put_u16(&b, (uint16_t)(int16_t)-30000); nkv++;
  l.u32_type = put_key(&b, "test.u32", 4, NULL); put_u32(&b, 4000000000u); nkv++;
  put_key(&b, "test.i32", 5, NULL); put_u32(&b, (uint32_t)(int32_t)-2000000000); nkv++;
  put_key(&b, "test.f32", 6, NULL); put_f32(&b, 1.5f); nkv++;
  put_key(&b, "test.bool", 7, NULL); l.bool_val = put_u8(&b, 1); nkv++;
  put_key(&b, "test.u64", 10, NULL); put_u64(&b, 1ull << 40); nkv++;
  put_key(&b, "test.u64big", 10, NULL); put_u64(&b, UINT64_MAX); nkv++;
  put_key(&b, "test.i64", 11, NULL); put_u64(&b, (uint64_t)-(1ll << 40)); nkv++;
  put_key(&b, "test.f64", 12, NULL); put_f64(&b, 2.25); nkv++;
  put_key(&b, "test.arr_u32", 9, NULL);
  l.arr_type = put_u32(&b, 4);
  l.arr_len = put_u64(&b, 4);
  for (uint32_t i = 1; i <= 4; i++) put_u32(&b, i);
  nkv++;
  put_key(&b, "test.arr_f32", 9, NULL); put_u32(&b, 6); put_u64(&b, 2); put_f32(&b, 0.5f); put_f32(&b, -1.0f); nkv++;
  put_key(&b, "test.arr_bool", 9, NULL); put_u32(&b, 7); put_u64(&b, 2); put_u8(&b, 1); put_u8(&b, 0); nkv++;
  put_key(&b, "test.arr_i16", 9, NULL); put_u32(&b, 3); put_u64(&b, 2); put_u16(&b, (uint16_t)(int16_t)-7); put_u16(&b, 9); nkv++;
  put_key(&b, "test.empty", 9, NULL); put_u32(&b, 0); put_u64(&b, 0); nkv++;
  put_key(&b, "tokenizer.ggml.tokens", 9, NULL); put_u32(&b, 8); put_u64(&b, 4);
  l.tok_len0 = put_str(&b, "a"); put_str(&b, "bc"); put_str(&b, ""); l.tok_len3 = put_str(&b, "def");
  nkv++;
  /* [[1, 2], [3]] of int32, then [["x", "yz"]] */
  put_key(&b, "test.nested", 9, NULL); put_u32(&b, 9); put_u64(&b, 2);
  l.nested_inner_type = put_u32(&b, 5); put_u64(&b, 2); put_u32(&b, 1); put_u32(&b, 2);
  put_u32(&b, 5); put_u64(&b, 1); put_u32(&b, 3);
  nkv++;
  put_key(&b, "test.nested_str", 9, NULL); put_u32(&b, 9); put_u64(&b, 1);
  put_u32(&b, 8); put_u64(&b, 2); put_str(&b, "x"); put_str(&b, "yz");
  nkv++;
  memcpy(b.p + l.n_kv, &nkv, 8);

  static const uint32_t def_types[NT] = {0, 8, 12};
  const uint32_t *types = o.types ? o.types : def_types;
  uint64_t dims[NT][2], offs[NT], end = 0;
  uint32_t ndims[NT];
  for (int t = 0; t < NT; t++) {
    int64_t be = dt_block_elems((gt_type_t)types[t]);
    dims[t][0] = be == 1 ? (types[t] == 0 ? 8 : 16) : be == 32 ? 64 : 256;
    dims[t][1] = be == 256 ? 1 : 2;
    ndims[t] = be == 256 ? 1 : 2;
    offs[t] = (end + 31) & ~31ull;
    end = offs[t] + dt_row_bytes((gt_type_t)types[t], (int64_t)dims[t][0]) * dims[t][1];
  }
  for (int t = 0; t < NT; t++) {
    l.t_name[t] = put_str(&b, k_tnames[t]);
    l.t_ndims[t] = put_u32(&b, ndims[t]);
    for (uint32_t d = 0; d < ndims[t]; d++) l.t_dim[t][d] = put_u64(&b, dims[t][d]);
    l.t_type[t] = put_u32(&b, types[t]);
    l.t_off[t] = put_u64(&b, offs[t]);
  }
  while (b.len % 32) put_u8(&b, 0);
  l.data = b.len;
  if (o.types) {
    /* other types: pseudo-random contents (seeds for the fuzzer) */
    uint32_t x = 12345;
    while (b.len < l.data + end) {
      x = x * 1103515245u + 12345u;
      put_u8(&b, (uint8_t)(x >> 16));
    }
  } else {
    /* F32: i * 0.5 */
    for (int i = 0; i < 16; i++) put_f32(&b, (float)i * 0.5f);
    /* Q8_0: d = 1.0 (0x3c00), q = l - 16 */
    for (int r = 0; r < 4; r++) {
      put_u16(&b, 0x3c00);
      for (int k = 0; k < 32; k++) put_u8(&b, (uint8_t)(int8_t)(k - 16));
    }
    while (b.len < l.data + 224) put_u8(&b, 0xee); /* padding between tensors */
    /* Q4_K: d = 1, dmin = 0, all scales 1, q = l % 16 */
    put_u16(&b, 0x3c00);
    put_u16(&b, 0);
    for (int k = 0; k < 12; k++) put_u8(&b, k < 4 ? 1 : (k >= 8 ? 1 : 0));
    for (int k = 0; k < 128; k++) put_u8(&b, (uint8_t)((k % 16) | ((k % 16) << 4)));
    assert_int_equal(b.len, l.data + 368);
  }
  if (L) *L = l;
  return b;
}

static buf_t build_default(layout_t *L) { return build_image((build_opts_t){3, 1, NULL}, L); }

/* ------------------------------------------------------------ walking a parsed file */

/* Touches every accessor and every byte of every tensor, as a consumer would (ASan checks the
 * reads stay inside the buffer). Returns a checksum so nothing is optimized away. */
static uint64_t walk(const gguf_t *g) {
  uint64_t sum = gguf_version(g) + gguf_alignment(g) + gguf_data_offset(g);
  for (int64_t i = 0; i < gguf_n_kv(g); i++) {
    const char *k = gguf_key(g, i);
    sum += strlen(k) + (uint64_t)gguf_kv_type(g, i);
    assert_int_equal(gguf_find_key(g, k), i);
    int64_t iv;
    double fv;
    int bv;
    const char *s;
    size_t n;
    if (gguf_get_int(g, k, &iv) == GT_OK) sum += (uint64_t)iv;
    if (gguf_get_float(g, k, &fv) == GT_OK) sum += fv == fv;
    if (gguf_get_bool(g, k, &bv) == GT_OK) sum += (uint64_t)bv;
    if (gguf_get_str(g, k, &s, &n) == GT_OK && n) sum += (uint8_t)s[0] + (uint8_t)s[n - 1];
    gguf_vtype_t et;
    uint64_t an;
    if (gguf_get_arr(g, k, &et, &an) == GT_OK) {
      for (uint64_t j = 0; j < an && j < 64; j++) {
        uint64_t idx = j < 32 ? j : an - 1 - (j - 32);
        if (gguf_arr_int(g, k, idx, &iv) == GT_OK) sum += (uint64_t)iv;
        if (gguf_arr_float(g, k, idx, &fv) == GT_OK) sum += fv == fv;
        if (gguf_arr_str(g, k, idx, &s, &n) == GT_OK && n) sum += (uint8_t)s[0] + (uint8_t)s[n - 1];
      }
      assert_int_equal(gguf_arr_int(g, k, an, &iv) == GT_ERANGE || gguf_arr_int(g, k, an, &iv) == GT_EFORMAT, 1);
    }
  }
  for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
    const gguf_tensor_t *t = gguf_tensor(g, i);
    assert_ptr_equal(gguf_find_tensor(g, t->name), t);
    const uint8_t *p = t->data;
    for (size_t j = 0; j < t->nbytes; j += 61) sum += p[j];
    if (t->nbytes) sum += p[t->nbytes - 1];
  }
  return sum;
}

/* ------------------------------------------------------------ the valid image */

static void test_valid_image(void **state) {
  (void)state;
  layout_t L;
  buf_t b = build_default(&L);
  gguf_t *g = NULL;
  gt_err_t err = {0};
  int rc = gguf_open_buffer(b.p, b.len, &g, &err);
  if (rc) fail_msg("valid image rejected: %s", err.msg);
  assert_int_equal(gguf_version(g), 3);
  assert_int_equal(gguf_alignment(g), 32);
  assert_int_equal(gguf_data_offset(g), L.data);
  assert_int_equal(gguf_file_size(g), b.len);
  assert_string_equal(gguf_arch(g), "qwen3");
  assert_int_equal(gguf_n_kv(g), 23);
  int64_t v;
  double f;
  int bo;
  const char *s;
  size_t n;
  assert_int_equal(gguf_get_int(g, "test.u8", &v), GT_OK); assert_int_equal(v, 200);
  assert_int_equal(gguf_get_int(g, "test.i8", &v), GT_OK); assert_int_equal(v, -100);
  assert_int_equal(gguf_get_int(g, "test.u16", &v), GT_OK); assert_int_equal(v, 60000);
  assert_int_equal(gguf_get_int(g, "test.i16", &v), GT_OK); assert_int_equal(v, -30000);
  assert_int_equal(gguf_get_int(g, "test.u32", &v), GT_OK); assert_int_equal(v, 4000000000ll);
  assert_int_equal(gguf_get_int(g, "test.i32", &v), GT_OK); assert_int_equal(v, -2000000000ll);
  assert_int_equal(gguf_get_int(g, "test.u64", &v), GT_OK); assert_int_equal(v, 1ll << 40);
  assert_int_equal(gguf_get_int(g, "test.i64", &v), GT_OK); assert_int_equal(v, -(1ll << 40));
  assert_int_equal(gguf_get_int(g, "test.u64big", &v), GT_EFORMAT); /* does not fit int64 */
  assert_int_equal(gguf_get_float(g, "test.u64big", &f), GT_OK); assert_true(f == 18446744073709551615.0);
  assert_int_equal(gguf_get_int(g, "test.bool", &v), GT_OK); assert_int_equal(v, 1);
  assert_int_equal(gguf_get_int(g, "test.f32", &v), GT_EFORMAT);
  assert_int_equal(gguf_get_int(g, "general.name", &v), GT_EFORMAT);
  assert_int_equal(gguf_get_int(g, "no.such.key", &v), GT_ENOTFOUND);
  assert_int_equal(gguf_get_float(g, "test.f32", &f), GT_OK); assert_true(f == 1.5);
  assert_int_equal(gguf_get_float(g, "test.f64", &f), GT_OK); assert_true(f == 2.25);
  assert_int_equal(gguf_get_float(g, "test.i16", &f), GT_OK); assert_true(f == -30000.0);
  assert_int_equal(gguf_get_float(g, "general.name", &f), GT_EFORMAT);
  assert_int_equal(gguf_get_bool(g, "test.bool", &bo), GT_OK); assert_int_equal(bo, 1);
  assert_int_equal(gguf_get_bool(g, "test.u8", &bo), GT_EFORMAT);
  assert_int_equal(gguf_get_str(g, "general.name", &s, &n), GT_OK);
  assert_int_equal(n, 9); assert_memory_equal(s, "tiny test", 9);
  assert_int_equal(gguf_get_str(g, "test.u8", &s, &n), GT_EFORMAT);
  assert_int_equal(gguf_get_str(g, "nope", &s, &n), GT_ENOTFOUND);

  gguf_vtype_t et;
  uint64_t an;
  assert_int_equal(gguf_get_arr(g, "test.arr_u32", &et, &an), GT_OK);
  assert_int_equal(et, GGUF_VT_UINT32); assert_int_equal(an, 4);
  for (uint64_t i = 0; i < 4; i++) {
    assert_int_equal(gguf_arr_int(g, "test.arr_u32", i, &v), GT_OK);
    assert_int_equal(v, (int64_t)i + 1);
  }
  assert_int_equal(gguf_arr_int(g, "test.arr_u32", 4, &v), GT_ERANGE);
  const uint8_t *raw = gguf_arr_data(g, "test.arr_u32");
  assert_non_null(raw);
  uint32_t r3;
  memcpy(&r3, raw + 12, 4);
  assert_int_equal(r3, 4);
  assert_int_equal(gguf_arr_float(g, "test.arr_f32", 1, &f), GT_OK); assert_true(f == -1.0);
  assert_int_equal(gguf_arr_int(g, "test.arr_f32", 0, &v), GT_EFORMAT);
  assert_int_equal(gguf_arr_int(g, "test.arr_bool", 0, &v), GT_OK); assert_int_equal(v, 1);
  assert_int_equal(gguf_arr_int(g, "test.arr_i16", 0, &v), GT_OK); assert_int_equal(v, -7);
  assert_int_equal(gguf_arr_float(g, "test.arr_i16", 1, &f), GT_OK); assert_true(f == 9.0);
  assert_int_equal(gguf_get_arr(g, "test.empty", &et, &an), GT_OK); assert_int_equal(an, 0);
  assert_int_equal(gguf_arr_int(g, "test.empty", 0, &v), GT_ERANGE);
  assert_int_equal(gguf_get_arr(g, "general.name", &et, &an), GT_EFORMAT);
  assert_int_equal(gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &an), GT_OK);
  assert_int_equal(et, GGUF_VT_STRING); assert_int_equal(an, 4);
  static const char *toks[4] = {"a", "bc", "", "def"};
  for (uint64_t i = 0; i < 4; i++) {
    assert_int_equal(gguf_arr_str(g, "tokenizer.ggml.tokens", i, &s, &n), GT_OK);
    assert_int_equal(n, strlen(toks[i]));
    assert_memory_equal(s, toks[i], n);
  }
  assert_int_equal(gguf_arr_str(g, "tokenizer.ggml.tokens", 4, &s, &n), GT_ERANGE);
  assert_null(gguf_arr_data(g, "tokenizer.ggml.tokens"));
  assert_int_equal(gguf_arr_int(g, "tokenizer.ggml.tokens", 0, &v), GT_EFORMAT);
  assert_int_equal(gguf_arr_str(g, "test.arr_u32", 0, &s, &n), GT_EFORMAT);
  assert_int_equal(gguf_get_arr(g, "test.nested", &et, &an), GT_OK);
  assert_int_equal(et, GGUF_VT_ARRAY); assert_int_equal(an, 2);
  assert_null(gguf_arr_data(g, "test.nested"));
  assert_int_equal(gguf_arr_int(g, "test.nested", 0, &v), GT_EFORMAT);
  assert_int_equal(gguf_kv_type(g, gguf_find_key(g, "test.f64")), GGUF_VT_FLOAT64);
  assert_int_equal(gguf_find_key(g, "test"), -1);
  assert_null(gguf_key(g, 23));
  assert_null(gguf_key(g, -1));

  assert_int_equal(gguf_n_tensors(g), 3);
  const gguf_tensor_t *t = gguf_find_tensor(g, "t.b0");
  assert_non_null(t);
  assert_int_equal(t->type, GT_TYPE_Q8_0);
  assert_int_equal(t->n_dims, 2);
  assert_int_equal(t->ne[0], 64); assert_int_equal(t->ne[1], 2);
  assert_int_equal(t->ne[2], 1); assert_int_equal(t->ne[3], 1);
  assert_int_equal(t->offset, 64);
  assert_int_equal(t->nbytes, 136);
  assert_ptr_equal(t->data, b.p + L.data + 64);
  assert_ptr_equal(gguf_tensor(g, 1), t);
  assert_null(gguf_tensor(g, 3));
  assert_null(gguf_find_tensor(g, "t.d0"));
  float row[256];
  assert_int_equal(dt_dequant_row(t->type, t->data, row, 64), GT_OK);
  for (int k = 0; k < 64; k++) assert_true(row[k] == (float)(k % 32 - 16));
  t = gguf_find_tensor(g, "t.a0");
  assert_int_equal(t->nbytes, 64);
  assert_int_equal(dt_dequant_row(t->type, t->data, row, 16), GT_OK);
  assert_true(row[15] == 7.5f);
  t = gguf_find_tensor(g, "t.c0");
  assert_int_equal(t->nbytes, 144);
  assert_int_equal(dt_dequant_row(t->type, t->data, row, 256), GT_OK);
  assert_true(row[17] == 1.0f && row[32 + 3] == 3.0f);
  walk(g);
  gguf_close(g);

  /* version 2 and a file without general.alignment (default 32) parse too */
  free(b.p);
  b = build_image((build_opts_t){2, 0, NULL}, &L);
  rc = gguf_open_buffer(b.p, b.len, &g, &err);
  if (rc) fail_msg("v2 image rejected: %s", err.msg);
  assert_int_equal(gguf_version(g), 2);
  assert_int_equal(gguf_alignment(g), 32);
  assert_int_equal(gguf_find_key(g, "general.alignment"), -1);
  gguf_close(g);
  free(b.p);
}

/* ------------------------------------------------------------ corrupt images */

static void patch32(buf_t *b, size_t at, uint32_t v) { memcpy(b->p + at, &v, 4); }
static void patch64(buf_t *b, size_t at, uint64_t v) { memcpy(b->p + at, &v, 8); }

/* Expects open to fail with code (EFORMAT or EUNSUPPORTED) and a message containing want. */
static void expect_bad(const buf_t *b, size_t len, int code, const char *want, const char *what) {
  gguf_t *g = (gguf_t *)(uintptr_t)1;
  gt_err_t err = {0};
  /* a copy of exactly len bytes, so ASan sees any read past the end */
  uint8_t *copy = malloc(len ? len : 1);
  memcpy(copy, b->p, len);
  int rc = gguf_open_buffer(copy, len, &g, &err);
  if (rc != code)
    fail_msg("%s: rc %s, want %s (msg: %s)", what, gt_err_name(rc), gt_err_name(code), err.msg);
  assert_null(g);
  assert_int_equal(err.code, code);
  if (!err.msg[0]) fail_msg("%s: empty error message", what);
  if (want && !strstr(err.msg, want)) fail_msg("%s: message '%s' lacks '%s'", what, err.msg, want);
  /* the same without an error record: same code */
  assert_int_equal(gguf_open_buffer(copy, len, &g, NULL), code);
  free(copy);
}

typedef struct {
  const char *what;
  int code;
  const char *want; /* substring of the message */
  void (*apply)(buf_t *, const layout_t *);
} corruption_t;

#define CORR(name, body) \
  static void name(buf_t *b, const layout_t *L) { (void)L; body; }
CORR(c_magic, b->p[0] = 'X')
CORR(c_v1, patch32(b, L->version, 1))
CORR(c_v4, patch32(b, L->version, 4))
CORR(c_v0, patch32(b, L->version, 0))
CORR(c_bigendian, patch32(b, L->version, 0x03000000u))
CORR(c_nkv_huge, patch64(b, L->n_kv, 1ull << 60))
CORR(c_nkv_max, patch64(b, L->n_kv, UINT64_MAX))
CORR(c_nkv_plus1, { uint64_t v; memcpy(&v, b->p + L->n_kv, 8); patch64(b, L->n_kv, v + 1); })
CORR(c_nt_huge, patch64(b, L->n_tensors, 1ull << 62))
CORR(c_nt_plus1, patch64(b, L->n_tensors, NT + 1))
CORR(c_key_len_huge, patch64(b, 24, 1ull << 50))
CORR(c_key_len_max, patch64(b, 24, UINT64_MAX))
CORR(c_key_len_zero, patch64(b, 24, 0))
CORR(c_str_past_eof, patch64(b, L->name_len, 100000))
CORR(c_str_max, patch64(b, L->name_len, UINT64_MAX - 3))
CORR(c_vtype, patch32(b, L->u32_type, 13))
CORR(c_vtype_max, patch32(b, L->u32_type, 0xffffffffu))
CORR(c_bool2, b->p[L->bool_val] = 2)
CORR(c_arr_type, patch32(b, L->arr_type, 13))
CORR(c_arr_len, patch64(b, L->arr_len, 1ull << 61))
CORR(c_arr_len_max, patch64(b, L->arr_len, UINT64_MAX))
CORR(c_tok_len, patch64(b, L->tok_len3, 1ull << 40))
CORR(c_tok_len_wrap, patch64(b, L->tok_len0, UINT64_MAX - 7))
CORR(c_nested_type, patch32(b, L->nested_inner_type, 77))
CORR(c_dup_key, memcpy(b->p + L->i8_key + 8, "test.u8", 7)) /* "test.i8" -> "test.u8" */
CORR(c_key_nul, b->p[L->i8_key + 8 + 4] = 0)
CORR(c_align0, patch32(b, L->align_val, 0))
CORR(c_align3, patch32(b, L->align_val, 3))
CORR(c_align48, patch32(b, L->align_val, 48))
CORR(c_align_huge, patch32(b, L->align_val, 0x80000000u))
CORR(c_align_type, patch32(b, L->align_type, 6)) /* float32 1.5e-44 */
CORR(c_align64, patch32(b, L->align_val, 64))    /* valid, but t.c0 at 224 is then misaligned */
CORR(c_ttype4, patch32(b, L->t_type[1], 4))
CORR(c_ttype40, patch32(b, L->t_type[1], 40))
CORR(c_ttype_max, patch32(b, L->t_type[1], 0xffffffffu))
CORR(c_ndims0, patch32(b, L->t_ndims[0], 0))
CORR(c_ndims5, patch32(b, L->t_ndims[0], 5))
CORR(c_ndims_max, patch32(b, L->t_ndims[0], 0xffffffffu))
CORR(c_dim0, patch64(b, L->t_dim[1][1], 0))
CORR(c_dim_neg, patch64(b, L->t_dim[1][0], (uint64_t)-64))
CORR(c_nel_overflow, { patch64(b, L->t_dim[0][0], 1ull << 32); patch64(b, L->t_dim[0][1], 1ull << 32); })
CORR(c_bytes_overflow, { patch64(b, L->t_dim[1][0], 1ull << 62); patch64(b, L->t_dim[1][1], 1); })
CORR(c_row_block, patch64(b, L->t_dim[1][0], 48))
CORR(c_off_misaligned, patch64(b, L->t_off[2], 225))
CORR(c_off_past, patch64(b, L->t_off[2], 1ull << 40))
CORR(c_off_wrap, patch64(b, L->t_off[2], UINT64_MAX & ~31ull))
CORR(c_size_past, patch64(b, L->t_dim[2][0], 512))
CORR(c_overlap, patch64(b, L->t_off[1], 32))
CORR(c_overlap_same, patch64(b, L->t_off[2], 64))
CORR(c_dup_tensor, memcpy(b->p + L->t_name[1] + 8, "t.a0", 4))
CORR(c_tname_len0, patch64(b, L->t_name[0], 0))
CORR(c_tname_huge, patch64(b, L->t_name[2], 1ull << 33))

static const corruption_t k_corruptions[] = {
    {"bad magic", GT_EFORMAT, "magic", c_magic},
    {"version 1", GT_EUNSUPPORTED, "unsupported version 1", c_v1},
    {"version 4", GT_EUNSUPPORTED, "unsupported version 4", c_v4},
    {"version 0", GT_EUNSUPPORTED, "unsupported version 0", c_v0},
    {"big-endian", GT_EUNSUPPORTED, "big-endian", c_bigendian},
    {"n_kv huge", GT_EFORMAT, "n_kv", c_nkv_huge},
    {"n_kv max", GT_EFORMAT, "n_kv", c_nkv_max},
    {"n_kv + 1", GT_EFORMAT, NULL, c_nkv_plus1},
    {"n_tensors huge", GT_EFORMAT, "n_tensors", c_nt_huge},
    {"n_tensors + 1", GT_EFORMAT, NULL, c_nt_plus1},
    {"key length huge", GT_EFORMAT, "key 0", c_key_len_huge},
    {"key length max", GT_EFORMAT, "key 0", c_key_len_max},
    {"key length 0", GT_EFORMAT, "key 0", c_key_len_zero},
    {"string past EOF", GT_EFORMAT, "general.name", c_str_past_eof},
    {"string length max", GT_EFORMAT, "general.name", c_str_max},
    {"value type 13", GT_EFORMAT, "test.u32': unknown value type 13", c_vtype},
    {"value type max", GT_EFORMAT, "test.u32': unknown value type 4294967295", c_vtype_max},
    {"bool 2", GT_EFORMAT, "test.bool", c_bool2},
    {"array elem type", GT_EFORMAT, "test.arr_u32': unknown array element type 13", c_arr_type},
    {"array length", GT_EFORMAT, "test.arr_u32", c_arr_len},
    {"array length max", GT_EFORMAT, "test.arr_u32", c_arr_len_max},
    {"token length", GT_EFORMAT, "tokenizer.ggml.tokens", c_tok_len},
    {"token length wrap", GT_EFORMAT, "tokenizer.ggml.tokens", c_tok_len_wrap},
    {"nested elem type", GT_EFORMAT, "test.nested': unknown array element type 77", c_nested_type},
    {"duplicate key", GT_EFORMAT, "duplicate key 'test.u8'", c_dup_key},
    {"NUL in key", GT_EFORMAT, "NUL", c_key_nul},
    {"alignment 0", GT_EFORMAT, "general.alignment", c_align0},
    {"alignment 3", GT_EFORMAT, "general.alignment", c_align3},
    {"alignment 48", GT_EFORMAT, "general.alignment", c_align48},
    {"alignment 2^31", GT_EFORMAT, "general.alignment", c_align_huge},
    {"alignment type", GT_EFORMAT, "general.alignment", c_align_type},
    {"alignment 64", GT_EFORMAT, "t.c0': data offset 224 is not a multiple of the alignment 64", c_align64},
    {"tensor type 4", GT_EFORMAT, "t.b0': unknown tensor type 4", c_ttype4},
    {"tensor type 40", GT_EFORMAT, "t.b0': unknown tensor type 40", c_ttype40},
    {"tensor type max", GT_EFORMAT, "t.b0': unknown tensor type", c_ttype_max},
    {"n_dims 0", GT_EFORMAT, "t.a0': n_dims 0", c_ndims0},
    {"n_dims 5", GT_EFORMAT, "t.a0': n_dims 5", c_ndims5},
    {"n_dims max", GT_EFORMAT, "t.a0': n_dims", c_ndims_max},
    {"dim 0", GT_EFORMAT, "t.b0': dimension 1 is 0", c_dim0},
    {"dim negative", GT_EFORMAT, "t.b0': dimension 0 is -64", c_dim_neg},
    {"element overflow", GT_EFORMAT, "t.a0': element count overflows", c_nel_overflow},
    {"byte size past EOF", GT_EFORMAT, "t.b0'", c_bytes_overflow},
    {"row not multiple of block", GT_EFORMAT, "t.b0': row length 48 is not a multiple of the Q8_0 block size 32", c_row_block},
    {"offset misaligned", GT_EFORMAT, "t.c0': data offset 225", c_off_misaligned},
    {"offset past EOF", GT_EFORMAT, "t.c0'", c_off_past},
    {"offset wraps", GT_EFORMAT, "t.c0'", c_off_wrap},
    {"size past EOF", GT_EFORMAT, "t.c0': data [224, +288) runs past end", c_size_past},
    {"overlap", GT_EFORMAT, "overlap", c_overlap},
    {"overlap same offset", GT_EFORMAT, "overlap", c_overlap_same},
    {"duplicate tensor", GT_EFORMAT, "duplicate tensor name 't.a0'", c_dup_tensor},
    {"tensor name length 0", GT_EFORMAT, "tensor 0", c_tname_len0},
    {"tensor name length huge", GT_EFORMAT, "tensor 2", c_tname_huge},
};

static void test_corrupt_fields(void **state) {
  (void)state;
  layout_t L;
  buf_t clean = build_default(&L);
  size_t n = sizeof k_corruptions / sizeof k_corruptions[0];
  for (size_t i = 0; i < n; i++) {
    buf_t b = {malloc(clean.len), clean.len, clean.len};
    memcpy(b.p, clean.p, clean.len);
    k_corruptions[i].apply(&b, &L);
    expect_bad(&b, b.len, k_corruptions[i].code, k_corruptions[i].want, k_corruptions[i].what);
    free(b.p);
  }
  printf("%zu corrupt images rejected with the expected message\n", n);
  free(clean.p);
}

static void test_truncated(void **state) {
  (void)state;
  layout_t L;
  for (int v = 2; v <= 3; v++) {
    buf_t b = build_image((build_opts_t){(uint32_t)v, v == 3, NULL}, &L);
    for (size_t cut = 0; cut < b.len; cut++) {
      char what[64];
      snprintf(what, sizeof what, "v%d truncated at %zu", v, cut);
      expect_bad(&b, cut, GT_EFORMAT, NULL, what);
    }
    printf("v%d: %zu truncations rejected\n", v, b.len);
    free(b.p);
  }
}

/* arrays nested beyond the limit; also a very deep nest that would blow the stack if the
 * parser recursed without a bound */
static void test_nesting_bomb(void **state) {
  (void)state;
  for (int depth = 7; depth <= 100000; depth = depth < 10 ? depth + 1 : depth * 10) {
    buf_t b = {0};
    put_u32(&b, 0x46554747u);
    put_u32(&b, 3);
    put_u64(&b, 0);
    put_u64(&b, 1);
    put_key(&b, "deep", 9, NULL);
    for (int i = 0; i < depth; i++) {
      put_u32(&b, 9);
      put_u64(&b, 1);
    }
    put_u32(&b, 4);
    put_u64(&b, 1);
    put_u32(&b, 42);
    gguf_t *g = NULL;
    gt_err_t err = {0};
    int rc = gguf_open_buffer(b.p, b.len, &g, &err);
    if (depth + 1 <= 8) {
      if (rc) fail_msg("depth %d rejected: %s", depth, err.msg);
      gguf_close(g);
    } else {
      assert_int_equal(rc, GT_EFORMAT);
      assert_non_null(strstr(err.msg, "'deep'"));
    }
    free(b.p);
  }
}

/* Random byte edits of the valid image: never a crash, only OK or a format error. */
static void test_random_mutations(void **state) {
  (void)state;
  layout_t L;
  buf_t clean = build_default(&L);
  uint64_t x = 0x1234567887654321ull;
  int ok = 0, bad = 0;
  uint8_t *m = malloc(clean.len);
  for (int it = 0; it < 20000; it++) {
    memcpy(m, clean.p, clean.len);
    int edits = 1 + it % 4;
    size_t len = clean.len;
    for (int e = 0; e < edits; e++) {
      x ^= x << 13; x ^= x >> 7; x ^= x << 17;
      size_t at = (size_t)(x % clean.len);
      switch ((x >> 32) % 4) {
        case 0: m[at] = (uint8_t)(x >> 40); break;
        case 1: m[at] ^= (uint8_t)(1u << ((x >> 40) % 8)); break;
        case 2: m[at] = 0xff; break;
        default: if (at < len) len = at + (x >> 40) % (len - at); break;
      }
    }
    gguf_t *g = NULL;
    gt_err_t err = {0};
    int rc = gguf_open_buffer(m, len, &g, &err);
    if (rc == GT_OK) {
      walk(g);
      gguf_close(g);
      ok++;
    } else {
      if (rc != GT_EFORMAT && rc != GT_EUNSUPPORTED) fail_msg("mutation %d: rc %s: %s", it, gt_err_name(rc), err.msg);
      assert_true(err.msg[0] != 0);
      bad++;
    }
  }
  printf("mutations: %d parsed, %d rejected\n", ok, bad);
  free(m);
  free(clean.p);
}

static void test_open_errors(void **state) {
  (void)state;
  gguf_t *g = NULL;
  gt_err_t err = {0};
  assert_int_equal(gguf_open("/nonexistent/x.gguf", &g, &err), GT_EIO);
  assert_non_null(strstr(err.msg, "/nonexistent/x.gguf"));
  assert_int_equal(gguf_open("/", &g, &err), GT_EIO);
  assert_int_equal(gguf_open_buffer("", 0, &g, &err), GT_EFORMAT);
  assert_int_equal(gguf_open_buffer(NULL, 0, &g, &err), GT_EFORMAT);
  /* a real file that is not GGUF: the message names the path */
  assert_int_equal(gguf_open(tu_golden("manifest.json"), &g, &err), GT_EFORMAT);
  assert_non_null(strstr(err.msg, "manifest.json"));
  assert_non_null(strstr(err.msg, "magic"));
  assert_null(g);
}

/* ------------------------------------------------------------ golden files */

static gguf_t *open_golden(const char *rel) {
  gguf_t *g = NULL;
  gt_err_t err = {0};
  int rc = gguf_open(tu_golden(rel), &g, &err);
  if (rc) fail_msg("%s: %s", rel, err.msg);
  return g;
}

static int64_t get_int(const gguf_t *g, const char *key) {
  int64_t v = -1;
  if (gguf_get_int(g, key, &v) != GT_OK) fail_msg("key %s missing or not an integer", key);
  return v;
}

static void check_str(const char *s, size_t n, const char *want) {
  if (n != strlen(want) || memcmp(s, want, n)) fail_msg("'%.*s' != '%s'", (int)n, s, want);
}

static void check_shape(const gguf_t *g, const char *name, int64_t ne0, int64_t ne1) {
  const gguf_tensor_t *t = gguf_find_tensor(g, name);
  if (!t) fail_msg("tensor %s missing", name);
  if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1 ||
      t->n_dims != (ne1 == 1 ? 1u : 2u))
    fail_msg("%s: shape [%lld, %lld] dims %u, want [%lld, %lld]", name, (long long)t->ne[0],
             (long long)t->ne[1], t->n_dims, (long long)ne0, (long long)ne1);
}

/* Checks common to every golden model: tensors inside the file, aligned, tokenizer arrays. */
static void check_model_common(const gguf_t *g, const char *arch, int64_t n_vocab) {
  assert_int_equal(gguf_version(g), 3);
  assert_string_equal(gguf_arch(g), arch);
  const char *s;
  size_t n;
  assert_int_equal(gguf_get_str(g, "general.architecture", &s, &n), GT_OK);
  check_str(s, n, arch);
  assert_int_equal(gguf_get_str(g, "tokenizer.ggml.model", &s, &n), GT_OK);
  check_str(s, n, "gpt2");
  assert_int_equal(gguf_get_str(g, "tokenizer.ggml.pre", &s, &n), GT_OK);
  check_str(s, n, "qwen2");
  gguf_vtype_t et;
  uint64_t cnt;
  assert_int_equal(gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &cnt), GT_OK);
  assert_int_equal(et, GGUF_VT_STRING);
  assert_int_equal(cnt, (uint64_t)n_vocab);
  assert_int_equal(gguf_arr_str(g, "tokenizer.ggml.tokens", 0, &s, &n), GT_OK);
  check_str(s, n, "!");
  assert_int_equal(gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &cnt), GT_OK);
  assert_int_equal(et, GGUF_VT_INT32);
  assert_int_equal(cnt, (uint64_t)n_vocab);
  assert_int_equal(gguf_arr_str(g, "tokenizer.ggml.merges", 0, &s, &n), GT_OK);
  check_str(s, n, "\xc4\xa0 \xc4\xa0"); /* "Ġ Ġ" */
  int b = 1;
  assert_int_equal(gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b), GT_OK);
  assert_int_equal(b, 0);
  assert_int_equal(gguf_get_str(g, "tokenizer.chat_template", &s, &n), GT_OK);
  assert_true(n > 100 && memcmp(s, "{%- if tools %}", 15) == 0);
  double eps;
  char key[128];
  snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
  assert_int_equal(gguf_get_float(g, key, &eps), GT_OK);
  assert_true(fabs(eps - 1e-6) < 1e-12);
  const uint8_t *base = NULL;
  for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
    const gguf_tensor_t *t = gguf_tensor(g, i);
    if (i == 0) base = (const uint8_t *)t->data - t->offset;
    assert_int_equal(t->offset % gguf_alignment(g), 0);
    assert_true(gguf_data_offset(g) + t->offset + t->nbytes <= gguf_file_size(g));
    assert_ptr_equal(t->data, base + t->offset);
    assert_int_equal(t->nbytes, dt_row_bytes(t->type, t->ne[0]) * (size_t)(t->ne[1] * t->ne[2] * t->ne[3]));
  }
}

/* qwen3-tiny: hidden 256, 4 heads x 64, 2 KV heads, ffn 512, vocab 1024, 4 layers. */
static void check_qwen3_tiny_shapes(const gguf_t *g) {
  assert_int_equal(get_int(g, "qwen3.block_count"), 4);
  assert_int_equal(get_int(g, "qwen3.embedding_length"), 256);
  assert_int_equal(get_int(g, "qwen3.feed_forward_length"), 512);
  assert_int_equal(get_int(g, "qwen3.attention.head_count"), 4);
  assert_int_equal(get_int(g, "qwen3.attention.head_count_kv"), 2);
  assert_int_equal(get_int(g, "qwen3.attention.key_length"), 64);
  assert_int_equal(get_int(g, "qwen3.context_length"), 32768);
  assert_int_equal(get_int(g, "tokenizer.ggml.eos_token_id"), 1017);
  double theta;
  assert_int_equal(gguf_get_float(g, "qwen3.rope.freq_base", &theta), GT_OK);
  assert_true(theta == 1e6);
  assert_int_equal(gguf_n_tensors(g), 3 + 4 * 11);
  check_shape(g, "token_embd.weight", 256, 1024);
  check_shape(g, "output.weight", 256, 1024);
  check_shape(g, "output_norm.weight", 256, 1);
  for (int l = 0; l < 4; l++) {
    char nm[64];
#define SHAPE(suffix, a, b) snprintf(nm, sizeof nm, "blk.%d." suffix, l), check_shape(g, nm, a, b)
    SHAPE("attn_q.weight", 256, 256);
    SHAPE("attn_k.weight", 256, 128);
    SHAPE("attn_v.weight", 256, 128);
    SHAPE("attn_output.weight", 256, 256);
    SHAPE("attn_q_norm.weight", 64, 1);
    SHAPE("attn_k_norm.weight", 64, 1);
    SHAPE("attn_norm.weight", 256, 1);
    SHAPE("ffn_norm.weight", 256, 1);
    SHAPE("ffn_gate.weight", 256, 512);
    SHAPE("ffn_up.weight", 256, 512);
    SHAPE("ffn_down.weight", 512, 256);
#undef SHAPE
  }
}

static void test_golden_qwen3_tiny(void **state) {
  (void)state;
  json_t *m = tu_json("manifest.json");
  json_t *model = json_object_get(json_object_get(m, "models"), "qwen3-tiny");
  json_t *files = json_object_get(model, "gguf");
  const char *q;
  json_t *fj;
  int checked_types = 0;
  json_object_foreach(files, q, fj) {
    const char *rel = json_string_value(fj);
    gguf_t *g = open_golden(rel);
    check_model_common(g, "qwen3", 1024);
    check_qwen3_tiny_shapes(g);
    char key[64];
    snprintf(key, sizeof key, "tensor_types_%s", q);
    json_t *types = json_object_get(model, key);
    if (types) {
      assert_int_equal((int64_t)json_object_size(types), gguf_n_tensors(g));
      const char *tn;
      json_t *tv;
      json_object_foreach(types, tn, tv) {
        const gguf_tensor_t *t = gguf_find_tensor(g, tn);
        if (!t) fail_msg("%s: tensor %s missing", rel, tn);
        if (strcmp(dt_name(t->type), json_string_value(tv)))
          fail_msg("%s: %s is %s, manifest says %s", rel, tn, dt_name(t->type), json_string_value(tv));
        checked_types++;
      }
    } else {
      /* bf16 file: matrices BF16, vectors F32 */
      for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor_t *t = gguf_tensor(g, i);
        assert_int_equal(t->type, t->n_dims == 2 ? GT_TYPE_BF16 : GT_TYPE_F32);
      }
    }
    walk(g);
    gguf_close(g);
  }
  assert_int_equal(checked_types, 3 * 47);
  json_decref(m);
}

static void test_golden_qwen35_tiny(void **state) {
  (void)state;
  gguf_t *g = open_golden("qwen35-tiny.bf16.gguf");
  check_model_common(g, "qwen35", 1024);
  assert_int_equal(get_int(g, "qwen35.block_count"), 4);
  assert_int_equal(get_int(g, "qwen35.full_attention_interval"), 4);
  assert_int_equal(get_int(g, "qwen35.ssm.conv_kernel"), 4);
  assert_int_equal(get_int(g, "qwen35.ssm.group_count"), 2);
  assert_int_equal(get_int(g, "qwen35.ssm.time_step_rank"), 4);
  assert_int_equal(get_int(g, "qwen35.rope.dimension_count"), 16);
  assert_int_equal(gguf_n_tensors(g), 56);
  check_shape(g, "token_embd.weight", 256, 1024);
  check_shape(g, "blk.0.ssm_conv1d.weight", 4, 512);
  check_shape(g, "blk.0.ssm_a", 4, 1);
  check_shape(g, "blk.0.attn_qkv.weight", 256, 512);
  check_shape(g, "blk.0.ssm_out.weight", 256, 256);
  assert_int_equal(gguf_find_tensor(g, "blk.0.ssm_conv1d.weight")->type, GT_TYPE_F32);
  assert_int_equal(gguf_find_tensor(g, "output.weight")->type, GT_TYPE_BF16);
  walk(g);
  gguf_close(g);
}

static void test_golden_demo(void **state) {
  (void)state;
  gguf_t *g = open_golden("demo/gantry-demo-code-22m.Q4_K_M.gguf");
  check_model_common(g, "qwen3", 8192);
  assert_int_equal(get_int(g, "qwen3.block_count"), 6);
  assert_int_equal(get_int(g, "qwen3.embedding_length"), 512);
  assert_int_equal(gguf_n_tensors(g), 68);
  assert_null(gguf_find_tensor(g, "output.weight")); /* tied embeddings */
  check_shape(g, "token_embd.weight", 512, 8192);
  assert_int_equal(gguf_find_tensor(g, "token_embd.weight")->type, GT_TYPE_Q6_K);
  check_shape(g, "blk.5.ffn_down.weight", 1536, 512);
  walk(g);
  gguf_close(g);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void test_golden_vocab(void **state) {
  (void)state;
  double t0 = now_ms();
  gguf_t *g = open_golden("qwen3-vocab.gguf");
  double t1 = now_ms();
  check_model_common(g, "qwen3", 151936);
  assert_int_equal(gguf_n_tensors(g), 0);
  gguf_vtype_t et;
  uint64_t n;
  assert_int_equal(gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n), GT_OK);
  assert_int_equal(n, 151387);
  const char *s;
  size_t len;
  assert_int_equal(gguf_arr_str(g, "tokenizer.ggml.tokens", 151643, &s, &len), GT_OK);
  check_str(s, len, "<|endoftext|>");
  assert_int_equal(gguf_arr_str(g, "tokenizer.ggml.tokens", 151935, &s, &len), GT_OK);
  check_str(s, len, "[PAD151935]");
  assert_int_equal(gguf_arr_str(g, "tokenizer.ggml.merges", 151386, &s, &len), GT_OK);
  check_str(s, len, "\xc3\xa2\xc2\xbd \xc4\xb9");
  int64_t tt;
  assert_int_equal(gguf_arr_int(g, "tokenizer.ggml.token_type", 151935, &tt), GT_OK);
  assert_int_equal(tt, 5);
  assert_int_equal(get_int(g, "tokenizer.ggml.eos_token_id"), 151645);
  /* every token, in O(1) each */
  double t2 = now_ms();
  uint64_t total = 0;
  for (uint64_t i = 0; i < 151936; i++) {
    assert_int_equal(gguf_arr_str(g, "tokenizer.ggml.tokens", i, &s, &len), GT_OK);
    total += len;
  }
  double t3 = now_ms();
  printf("qwen3-vocab.gguf: open %.1f ms, 151936 token lookups %.1f ms (%llu bytes)\n", t1 - t0,
         t3 - t2, (unsigned long long)total);
  gguf_close(g);
}

/* ------------------------------------------------------------ fuzz regressions */

static void test_fuzz_regressions(void **state) {
  (void)state;
  const char *src = getenv("GANTRY_SRC");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/tests/fuzz/regress/gguf", src ? src : ".");
  DIR *d = opendir(dir);
  if (!d) fail_msg("cannot open %s", dir);
  struct dirent *e;
  int nfiles = 0, nok = 0;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.' || strstr(e->d_name, ".md")) continue;
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat st;
    if (stat(path, &st) || !S_ISREG(st.st_mode)) continue;
    size_t len = 0;
    uint8_t *data = tu_read_file(path, &len);
    assert_non_null(data);
    /* exact-size copy so ASan catches reads past the end */
    uint8_t *copy = malloc(len ? len : 1);
    memcpy(copy, data, len);
    gguf_t *g = NULL;
    gt_err_t err = {0};
    int rc = gguf_open_buffer(copy, len, &g, &err);
    if (rc == GT_OK) {
      walk(g);
      gguf_close(g);
      nok++;
    } else if (rc != GT_EFORMAT && rc != GT_EUNSUPPORTED) {
      fail_msg("%s: rc %s: %s", e->d_name, gt_err_name(rc), err.msg);
    }
    free(copy);
    free(data);
    nfiles++;
  }
  closedir(d);
  printf("replayed %d fuzz regression inputs (%d parse)\n", nfiles, nok);
}

/* ------------------------------------------------------------ main */

/* The other computable types in the same layout parse, and their rows decode. */
static void test_other_types(void **state) {
  (void)state;
  static const uint32_t sets[2][NT] = {{1, 14, 13}, {30, 8, 12}}; /* F16 Q6_K Q5_K, BF16 Q8_0 Q4_K */
  for (int k = 0; k < 2; k++) {
    layout_t L;
    buf_t b = build_image((build_opts_t){3, 1, sets[k]}, &L);
    gguf_t *g = NULL;
    gt_err_t err = {0};
    if (gguf_open_buffer(b.p, b.len, &g, &err)) fail_msg("set %d: %s", k, err.msg);
    for (int t = 0; t < NT; t++) {
      const gguf_tensor_t *ti = gguf_find_tensor(g, k_tnames[t]);
      assert_int_equal(ti->type, (gt_type_t)sets[k][t]);
      float row[256];
      assert_int_equal(dt_dequant_row(ti->type, ti->data, row, ti->ne[0]), GT_OK);
    }
    walk(g);
    gguf_close(g);
    free(b.p);
  }
}

static int write_seeds(const char *dir) {
  layout_t L;
  static const uint32_t set_a[NT] = {1, 14, 13}, set_b[NT] = {30, 8, 12};
  struct { const char *name; build_opts_t o; } seeds[] = {
      {"valid-v3.gguf", {3, 1, NULL}},
      {"valid-v2-noalign.gguf", {2, 0, NULL}},
      {"valid-f16-q6k-q5k.gguf", {3, 1, set_a}},
      {"valid-bf16-q80-q4k.gguf", {3, 0, set_b}},
  };
  for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
    buf_t b = build_image(seeds[i].o, &L);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, seeds[i].name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b.p, 1, b.len, f) != b.len) return 1;
    fclose(f);
    free(b.p);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--write-seeds") == 0) return write_seeds(argv[2]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_valid_image),        cmocka_unit_test(test_corrupt_fields),
      cmocka_unit_test(test_truncated),          cmocka_unit_test(test_nesting_bomb),
      cmocka_unit_test(test_random_mutations),   cmocka_unit_test(test_open_errors),
      cmocka_unit_test(test_golden_qwen3_tiny),  cmocka_unit_test(test_golden_qwen35_tiny),
      cmocka_unit_test(test_golden_demo),        cmocka_unit_test(test_golden_vocab),
      cmocka_unit_test(test_other_types),        cmocka_unit_test(test_fuzz_regressions),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
