/* clients/bench_out.h — bench results as a stdout table, CSV and JSON. */
#ifndef GANTRY_CLIENTS_BENCH_OUT_H
#define GANTRY_CLIENTS_BENCH_OUT_H

#include <jansson.h>
#include <stdio.h>

#include "clients/bench_stats.h"
#include "clients/req.h"

/* Prints the table header / one row (fixed-width columns, "-" for missing values). */
void gc_table_header(FILE *f);
void gc_table_row(FILE *f, const gc_cell_t *c);
/* Writes results.csv content: a header and one row per cell; empty field = missing value. */
void gc_csv_write(FILE *f, const gc_cell_t *cells, int n);
/* New JSON objects (caller owns the reference); missing values are null. cell_index ties a
 * request to its cell in results.json. NULL on OOM. */
json_t *gc_cell_json(const gc_cell_t *c);
json_t *gc_req_json(const gc_req_t *r, int cell_index, int req_index);

#endif
