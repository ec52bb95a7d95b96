/* clients/bench_dataset.h — a JSONL dataset of prompts for `gantry bench --dataset F.jsonl`.
 * One JSON object per line (blank lines are skipped, other keys ignored):
 *   {"prompt": "text", "output_len": 128}   the prompt sent as it is
 *   {"input_len": 2000, "output_len": 128}  a filler prompt calibrated to input_len tokens
 * "prompt" wins when both are given. output_len (optional, > 0) becomes the request's
 * max_tokens (--max-tokens when absent). */
#ifndef GANTRY_CLIENTS_BENCH_DATASET_H
#define GANTRY_CLIENTS_BENCH_DATASET_H

#include <stdint.h>

#include "clients/bench_prompt.h"
#include "common/err.h"

typedef struct gc_ds_entry {
  char *prompt;    /* malloc'd; NULL until synthesized for an input_len entry */
  int synthesized; /* prompt was built from input_len (rebuilt per target) */
  int input_len;   /* tokens asked for, -1 when the line gave a prompt */
  int input_tokens; /* synthesized: the calibrated count; -1 otherwise */
  int output_len;  /* -1 = not given */
  int line;        /* 1-based line in the file */
} gc_ds_entry_t;

typedef struct gc_dataset {
  gc_ds_entry_t *e;
  int n;
} gc_dataset_t;

/* Reads path into ds (zeroed by the caller). GT_OK, or an error whose message names the file
 * and line (GT_EIO unreadable, GT_EFORMAT bad line, GT_EINVAL no entries); ds is then empty. */
int gc_dataset_load(const char *path, gc_dataset_t *ds, gt_err_t *err);
/* (Re)builds the prompt of every input_len entry with count (one tokenizer per target), seeds
 * seed + line so that no two entries share a prefix. Counter errors pass through. */
int gc_dataset_synthesize(gc_dataset_t *ds, gc_count_fn count, void *ud, uint64_t seed, gt_err_t *err);
/* Frees what ds owns (NULL-safe) and empties it. */
void gc_dataset_free(gc_dataset_t *ds);

#endif
