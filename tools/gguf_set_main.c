/* gantry-gguf-set IN OUT KEY=TYPE:VALUE ...
 *
 * Copies the GGUF file IN to OUT with every metadata key (scalars, strings, arrays) and tensor
 * verbatim, plus the given keys set (added, or replacing the file's value). TYPE: u32, i32, f32,
 * bool (0/1), str. E.g. turning a Qwen3 file into a last-token-pooling embedding model:
 *   gantry-gguf-set qwen3.gguf qwen3-embed.gguf qwen3.pooling_type=u32:3
 * Exit status: 0, 2 on bad arguments, 1 on I/O or format errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "format/gguf_write.h"

typedef struct {
  char key[256];
  char type[8];
  const char *val;
} set_t;

static int parse_set(const char *a, set_t *s) {
  const char *eq = strchr(a, '='), *colon = eq ? strchr(eq, ':') : NULL;
  if (!eq || !colon || eq == a || (size_t)(eq - a) >= sizeof s->key || (size_t)(colon - eq - 1) >= sizeof s->type) return -1;
  memcpy(s->key, a, (size_t)(eq - a));
  s->key[eq - a] = 0;
  memcpy(s->type, eq + 1, (size_t)(colon - eq - 1));
  s->type[colon - eq - 1] = 0;
  s->val = colon + 1;
  return strcmp(s->type, "u32") && strcmp(s->type, "i32") && strcmp(s->type, "f32") && strcmp(s->type, "bool") &&
                 strcmp(s->type, "str")
             ? -1
             : 0;
}

static int write_set(gw_t *w, const set_t *s, gt_err_t *err) {
  if (!strcmp(s->type, "u32")) return gw_kv_u32(w, s->key, (uint32_t)strtoul(s->val, NULL, 10), err);
  if (!strcmp(s->type, "i32")) return gw_kv_i32(w, s->key, (int32_t)strtol(s->val, NULL, 10), err);
  if (!strcmp(s->type, "f32")) return gw_kv_f32(w, s->key, strtof(s->val, NULL), err);
  if (!strcmp(s->type, "bool")) return gw_kv_bool(w, s->key, atoi(s->val) != 0, err);
  return gw_kv_str(w, s->key, s->val, strlen(s->val), err);
}

static size_t vt_size(gguf_vtype_t t) {
  switch (t) {
    case GGUF_VT_UINT8: case GGUF_VT_INT8: case GGUF_VT_BOOL: return 1;
    case GGUF_VT_UINT16: case GGUF_VT_INT16: return 2;
    case GGUF_VT_UINT32: case GGUF_VT_INT32: case GGUF_VT_FLOAT32: return 4;
    case GGUF_VT_UINT64: case GGUF_VT_INT64: case GGUF_VT_FLOAT64: return 8;
    default: return 0;
  }
}

/* Copies key i of g to w by its value type. */
static int copy_kv(const gguf_t *g, int64_t i, gw_t *w, gt_err_t *err) {
  const char *k = gguf_key(g, i);
  int64_t iv = 0;
  double fv = 0;
  switch (gguf_kv_type(g, i)) {
    case GGUF_VT_UINT8: gguf_get_int(g, k, &iv); return gw_kv_u8(w, k, (uint8_t)iv, err);
    case GGUF_VT_INT8: gguf_get_int(g, k, &iv); return gw_kv_i8(w, k, (int8_t)iv, err);
    case GGUF_VT_UINT16: gguf_get_int(g, k, &iv); return gw_kv_u16(w, k, (uint16_t)iv, err);
    case GGUF_VT_INT16: gguf_get_int(g, k, &iv); return gw_kv_i16(w, k, (int16_t)iv, err);
    case GGUF_VT_UINT32: gguf_get_int(g, k, &iv); return gw_kv_u32(w, k, (uint32_t)iv, err);
    case GGUF_VT_INT32: gguf_get_int(g, k, &iv); return gw_kv_i32(w, k, (int32_t)iv, err);
    case GGUF_VT_UINT64: gguf_get_int(g, k, &iv); return gw_kv_u64(w, k, (uint64_t)iv, err);
    case GGUF_VT_INT64: gguf_get_int(g, k, &iv); return gw_kv_i64(w, k, iv, err);
    case GGUF_VT_FLOAT32: gguf_get_float(g, k, &fv); return gw_kv_f32(w, k, (float)fv, err);
    case GGUF_VT_FLOAT64: gguf_get_float(g, k, &fv); return gw_kv_f64(w, k, fv, err);
    case GGUF_VT_BOOL: gguf_get_int(g, k, &iv); return gw_kv_bool(w, k, (int)iv, err);
    case GGUF_VT_STRING: {
      const char *s = NULL;
      size_t n = 0;
      gguf_get_str(g, k, &s, &n);
      return gw_kv_str(w, k, s, n, err);
    }
    case GGUF_VT_ARRAY: {
      gguf_vtype_t et;
      uint64_t n = 0;
      gguf_get_arr(g, k, &et, &n);
      if (et == GGUF_VT_STRING) {
        int rc = gw_kv_arr_str_begin(w, k, n, err);
        for (uint64_t j = 0; !rc && j < n; j++) {
          const char *s = NULL;
          size_t len = 0;
          gguf_arr_str(g, k, j, &s, &len);
          rc = gw_kv_arr_str_add(w, s, len, err);
        }
        return rc;
      }
      if (!vt_size(et)) return gt_err_set(err, GT_EUNSUPPORTED, "%s: nested arrays are not copied", k);
      return gw_kv_arr(w, k, et, gguf_arr_data(g, k), n, err);
    }
    default: return gt_err_set(err, GT_EFORMAT, "%s: unknown value type", k);
  }
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: gantry-gguf-set IN OUT KEY=TYPE:VALUE ...   (TYPE: u32 i32 f32 bool str)\n");
    return 2;
  }
  const int n_set = argc - 3;
  set_t *sets = calloc((size_t)n_set, sizeof *sets);
  for (int i = 0; sets && i < n_set; i++)
    if (parse_set(argv[3 + i], &sets[i])) {
      fprintf(stderr, "gantry-gguf-set: bad KEY=TYPE:VALUE '%s'\n", argv[3 + i]);
      free(sets);
      return 2;
    }
  gt_err_t err = {0};
  gguf_t *g = NULL;
  gw_t *w = NULL;
  int rc = sets ? gguf_open(argv[1], &g, &err) : gt_err_set(&err, GT_ENOMEM, "out of memory");
  if (!rc) rc = gw_create(argv[2], &w, &err);
  for (int64_t i = 0; !rc && i < gguf_n_kv(g); i++) {
    int replaced = 0;
    for (int j = 0; j < n_set; j++) replaced |= !strcmp(sets[j].key, gguf_key(g, i));
    if (!replaced) rc = copy_kv(g, i, w, &err);
  }
  for (int j = 0; !rc && j < n_set; j++) rc = write_set(w, &sets[j], &err);
  for (int64_t i = 0; !rc && i < gguf_n_tensors(g); i++) {
    const gguf_tensor_t *t = gguf_tensor(g, i);
    rc = gw_tensor(w, t->name, t->n_dims, t->ne, t->type, &err);
  }
  if (!rc) rc = gw_begin_data(w, &err);
  for (int64_t i = 0; !rc && i < gguf_n_tensors(g); i++) rc = gw_write(w, gguf_tensor(g, i)->data, gguf_tensor(g, i)->nbytes, &err);
  if (!rc) {
    rc = gw_finish(w, &err);
    w = NULL;
  }
  if (rc) fprintf(stderr, "gantry-gguf-set: %s\n", err.msg);
  gw_free(w);
  gguf_close(g);
  free(sets);
  return rc ? 1 : 0;
}
