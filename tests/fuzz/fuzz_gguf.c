/* tests/fuzz/fuzz_gguf.c — libFuzzer harness for the GGUF reader (see tests/fuzz/README.md).
 *
 * Each input is parsed from an exact-size heap copy (so ASan sees any read past the end); when
 * it parses, every accessor is exercised and the first rows of every computable tensor are
 * dequantized and dotted, which proves the tensor byte ranges the reader validated are real. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/dtype.h"
#include "format/gguf.h"

static volatile uint64_t g_sink;

static uint64_t walk(const gguf_t *g) {
  uint64_t sum = gguf_version(g) + gguf_alignment(g) + gguf_data_offset(g) + gguf_file_size(g);
  if (gguf_arch(g)) sum += strlen(gguf_arch(g));
  for (int64_t i = 0; i < gguf_n_kv(g); i++) {
    const char *k = gguf_key(g, i);
    if (gguf_find_key(g, k) != i) abort(); /* keys are unique: lookup must find this one */
    sum += (uint64_t)gguf_kv_type(g, i);
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
      const uint8_t *raw = gguf_arr_data(g, k);
      if (raw && an) sum += raw[0];
      for (uint64_t j = 0; j < an && j < 16; j++) {
        uint64_t idx = j < 8 ? j : an - 1 - (j - 8);
        if (gguf_arr_int(g, k, idx, &iv) == GT_OK) sum += (uint64_t)iv;
        if (gguf_arr_float(g, k, idx, &fv) == GT_OK) sum += fv == fv;
        if (gguf_arr_str(g, k, idx, &s, &n) == GT_OK && n) sum += (uint8_t)s[0] + (uint8_t)s[n - 1];
      }
      if (gguf_arr_int(g, k, an, &iv) == GT_OK) abort(); /* one past the end */
    }
  }
  static float row[4096], x[4096];
  for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
    const gguf_tensor_t *t = gguf_tensor(g, i);
    if (gguf_find_tensor(g, t->name) != t) abort();
    const uint8_t *p = t->data;
    if (t->nbytes) sum += p[0] + p[t->nbytes - 1];
    if (!dt_computable(t->type) || t->ne[0] > 4096) continue;
    size_t rb = dt_row_bytes(t->type, t->ne[0]);
    int64_t rows = (int64_t)(t->nbytes / rb);
    for (int64_t r = 0; r < rows && r < 4; r++) {
      if (dt_dequant_row(t->type, p + r * rb, row, t->ne[0]) != GT_OK) abort();
      float d = dt_dot_row(t->type, p + r * rb, x, t->ne[0]);
      sum += d == d;
    }
  }
  return sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *copy = malloc(size ? size : 1);
  if (!copy) return 0;
  memcpy(copy, data, size);
  gguf_t *g = NULL;
  gt_err_t err = {0};
  int rc = gguf_open_buffer(copy, size, &g, &err);
  if (rc == GT_OK) {
    g_sink += walk(g);
    gguf_close(g);
  } else if ((rc != GT_EFORMAT && rc != GT_EUNSUPPORTED) || !err.msg[0] || err.code != rc) {
    abort(); /* only format errors, always with a message */
  } else if (g) {
    abort(); /* *out must stay NULL on failure */
  }
  free(copy);
  return 0;
}
