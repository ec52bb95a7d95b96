/* clients/bench_dataset.c — JSONL prompt datasets: parsing and prompt synthesis. */
#include "clients/bench_dataset.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gc_dataset_free(gc_dataset_t *ds) {
  if (!ds) return;
  for (int i = 0; i < ds->n; i++) free(ds->e[i].prompt);
  free(ds->e);
  ds->e = NULL;
  ds->n = 0;
}

/* A positive integer field: its value, 0 when absent, -1 when present but not one. */
static long pos_int(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  if (!v) return 0;
  return json_is_integer(v) && json_integer_value(v) > 0 && json_integer_value(v) <= 100000000
             ? (long)json_integer_value(v)
             : -1;
}

static int parse_line(const char *path, int line, const char *text, size_t len, gc_ds_entry_t *e, gt_err_t *err) {
  json_error_t je;
  json_t *o = json_loadb(text, len, 0, &je);
  int rc = GT_OK;
  memset(e, 0, sizeof *e);
  e->line = line;
  e->input_len = e->input_tokens = e->output_len = -1;
  if (!json_is_object(o)) {
    rc = gt_err_set(err, GT_EFORMAT, "%s:%d: not a JSON object%s%s", path, line, o ? "" : ": ", o ? "" : je.text);
    goto out;
  }
  json_t *p = json_object_get(o, "prompt");
  long in = pos_int(o, "input_len"), outl = pos_int(o, "output_len");
  if (p && (!json_is_string(p) || json_string_length(p) == 0)) {
    rc = gt_err_set(err, GT_EFORMAT, "%s:%d: \"prompt\" must be a non-empty string", path, line);
  } else if (!p && in <= 0) {
    rc = gt_err_set(err, GT_EFORMAT, "%s:%d: needs \"prompt\" (a string) or \"input_len\" (a positive integer)%s",
                    path, line, in < 0 ? "; input_len is not one" : "");
  } else if (outl < 0) {
    rc = gt_err_set(err, GT_EFORMAT, "%s:%d: \"output_len\" must be a positive integer", path, line);
  } else {
    if (p && !(e->prompt = strdup(json_string_value(p)))) rc = gt_err_set(err, GT_ENOMEM, "dataset: out of memory");
    if (!p) e->input_len = (int)in;
    if (outl > 0) e->output_len = (int)outl;
  }
out:
  json_decref(o);
  return rc;
}

int gc_dataset_load(const char *path, gc_dataset_t *ds, gt_err_t *err) {
  FILE *f = fopen(path, "r");
  if (!f) return gt_err_set(err, GT_EIO, "--dataset %s: %s", path, strerror(errno));
  char *buf = NULL;
  size_t cap = 0;
  ssize_t len;
  int line = 0, rc = GT_OK, cap_e = 0;
  while (rc == GT_OK && (len = getline(&buf, &cap, f)) >= 0) {
    line++;
    size_t n = (size_t)len, k = 0;
    while (k < n && (buf[k] == ' ' || buf[k] == '\t' || buf[k] == '\r' || buf[k] == '\n')) k++;
    if (k == n) continue; /* blank */
    if (ds->n == cap_e) {
      int nc = cap_e ? cap_e * 2 : 64;
      gc_ds_entry_t *ne = realloc(ds->e, (size_t)nc * sizeof *ne);
      if (!ne) {
        rc = gt_err_set(err, GT_ENOMEM, "dataset: out of memory");
        break;
      }
      ds->e = ne;
      cap_e = nc;
    }
    rc = parse_line(path, line, buf, n, &ds->e[ds->n], err);
    if (rc == GT_OK) ds->n++;
  }
  if (rc == GT_OK && ferror(f)) rc = gt_err_set(err, GT_EIO, "--dataset %s: read error", path);
  if (rc == GT_OK && ds->n == 0) rc = gt_err_set(err, GT_EINVAL, "--dataset %s: no entries", path);
  free(buf);
  fclose(f);
  if (rc) gc_dataset_free(ds);
  return rc;
}

int gc_dataset_synthesize(gc_dataset_t *ds, gc_count_fn count, void *ud, uint64_t seed, gt_err_t *err) {
  for (int i = 0; i < ds->n; i++) {
    gc_ds_entry_t *e = &ds->e[i];
    if (e->input_len <= 0) continue;
    free(e->prompt);
    e->prompt = NULL;
    int rc = gc_prompt_calibrate(count, ud, e->input_len, seed + (uint64_t)e->line * 0x9E3779B9ULL, &e->prompt,
                                 &e->input_tokens, err);
    if (rc) return rc;
    e->synthesized = 1;
  }
  return GT_OK;
}
