/* tools/bench/gguf_dtype_bench.c — dtype-bench: single-core throughput of dt_dot_row (and
 * dt_dot_rows) per weight type (a matrix-vector product over a 4096 x 4096 matrix, row by row,
 * as the CPU backend does). Validates each kernel against dequant-then-dot first, then times
 * it; prints numbers only.
 *
 *   dtype-bench [rows] [cols] [reps] [batch]     (defaults 4096 4096 5 1)
 *
 * With batch > 1 it also times the matrix times `batch` x vectors two ways: dt_dot_row per
 * (weight row, x row) and dt_dot_rows per weight row (each block decoded once per x chunk),
 * checks both give the same bits, and prints both times. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "format/dtype.h"

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint32_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 11);
}
static float rndf(void) { return (float)((double)rnd() / 2147483648.0 - 1.0); }

static void put_h(uint8_t *p, uint16_t h) { memcpy(p, &h, 2); }

/* Random row contents with finite scales. */
static void fill(gt_type_t t, uint8_t *w, int64_t n) {
  size_t bytes = dt_row_bytes(t, n), bb = dt_block_bytes(t);
  for (size_t i = 0; i < bytes; i++) w[i] = (uint8_t)rnd();
  for (int64_t b = 0; b < n / dt_block_elems(t); b++) {
    uint8_t *p = w + b * bb;
    switch (t) {
      case GT_TYPE_F32: { float f = rndf(); memcpy(p, &f, 4); break; }
      case GT_TYPE_F16: put_h(p, dt_f32_to_f16(rndf())); break;
      case GT_TYPE_BF16: put_h(p, dt_f32_to_bf16(rndf())); break;
      case GT_TYPE_Q8_0: put_h(p, dt_f32_to_f16(rndf() * 0.01f)); break;
      case GT_TYPE_Q4_K: case GT_TYPE_Q5_K:
        put_h(p, dt_f32_to_f16(rndf() * 0.01f));
        put_h(p + 2, dt_f32_to_f16(rndf() * 0.01f));
        break;
      case GT_TYPE_Q6_K: put_h(p + 208, dt_f32_to_f16(rndf() * 0.01f)); break;
      default: break;
    }
  }
}

static double now_s(void) { return (double)gt_now_ns() * 1e-9; }

int main(int argc, char **argv) {
  int64_t rows = argc > 1 ? atoll(argv[1]) : 4096, cols = argc > 2 ? atoll(argv[2]) : 4096;
  int reps = argc > 3 ? atoi(argv[3]) : 5;
  int batch = argc > 4 ? atoi(argv[4]) : 1;
  if (rows <= 0 || cols <= 0 || cols % 256 || reps <= 0 || batch <= 0) {
    fprintf(stderr, "usage: dtype-bench [rows] [cols, multiple of 256] [reps] [batch]\n");
    return 2;
  }
  static const gt_type_t types[] = {GT_TYPE_F32, GT_TYPE_F16, GT_TYPE_BF16, GT_TYPE_Q8_0,
                                    GT_TYPE_Q4_K, GT_TYPE_Q5_K, GT_TYPE_Q6_K};
  float *x = malloc((size_t)cols * 4 * batch), *y = malloc((size_t)rows * 4), *deq = malloc((size_t)cols * 4);
  float *yb1 = malloc((size_t)rows * 4 * batch), *yb2 = malloc((size_t)rows * 4 * batch);
  if (!x || !y || !deq || !yb1 || !yb2) return 1;
  for (int64_t i = 0; i < cols * batch; i++) x[i] = rndf();
  printf("dtype-bench: %lld x %lld matrix, 1 core, best of %d; GB/s counts weight bytes\n",
         (long long)rows, (long long)cols, reps);
  if (batch > 1)
    printf("%-6s %-9s %10s %9s %9s %10s %12s %12s %8s\n", "type", "isa", "MB", "ms", "GB/s", "Gelem/s",
           "row x B ms", "rows(B) ms", "speedup");
  else
    printf("%-6s %-9s %10s %9s %9s %10s\n", "type", "isa", "MB", "ms", "GB/s", "Gelem/s");
  int failed = 0;
  for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
    gt_type_t t = types[ti];
    size_t rb = dt_row_bytes(t, cols), total = rb * (size_t)rows;
    uint8_t *w = malloc(total);
    if (!w) return 1;
    for (int64_t r = 0; r < rows; r++) fill(t, w + r * rb, cols);
    for (int isa = DT_ISA_AVX2; isa >= DT_ISA_PORTABLE; isa--) {
      if ((int)dt_set_isa((dt_isa_t)isa) != isa) continue;
      /* validate a few rows first */
      for (int64_t r = 0; r < rows && r < 8; r++) {
        dt_dequant_row(t, w + r * rb, deq, cols);
        double ref = 0, scale = 0;
        for (int64_t i = 0; i < cols; i++) {
          ref += (double)deq[i] * x[i];
          scale += fabs((double)deq[i] * x[i]);
        }
        float got = dt_dot_row(t, w + r * rb, x, cols);
        if (!(fabs(got - ref) <= 1e-5 * scale)) {
          printf("%-6s %-9s VALIDATION FAILED row %lld: %g vs %g\n", dt_name(t),
                 dt_isa_name((dt_isa_t)isa), (long long)r, got, ref);
          failed = 1;
        }
      }
      double best = 1e30;
      for (int k = 0; k < reps; k++) {
        double t0 = now_s();
        for (int64_t r = 0; r < rows; r++) y[r] = dt_dot_row(t, w + r * rb, x, cols);
        double dt = now_s() - t0;
        if (dt < best) best = dt;
      }
      printf("%-6s %-9s %10.1f %9.3f %9.2f %10.2f", dt_name(t), dt_isa_name((dt_isa_t)isa),
             total / 1e6, best * 1e3, total / best / 1e9, (double)rows * cols / best / 1e9);
      if (batch > 1) {
        double b1 = 1e30, b2 = 1e30;
        for (int k = 0; k < reps; k++) {
          double t0 = now_s();
          for (int64_t r = 0; r < rows; r++)
            for (int b = 0; b < batch; b++)
              yb1[(size_t)b * rows + r] = dt_dot_row(t, w + r * rb, x + (size_t)b * cols, cols);
          double t1 = now_s();
          for (int64_t r = 0; r < rows; r++)
            dt_dot_rows(t, w + r * rb, x, (size_t)cols, batch, cols, yb2 + r, (size_t)rows);
          double t2 = now_s();
          if (t1 - t0 < b1) b1 = t1 - t0;
          if (t2 - t1 < b2) b2 = t2 - t1;
        }
        int same = memcmp(yb1, yb2, (size_t)rows * batch * 4) == 0;
        if (!same) failed = 1;
        printf(" %12.3f %12.3f %7.2fx%s", b1 * 1e3, b2 * 1e3, b1 / b2, same ? "" : "  BITS DIFFER");
      }
      printf("\n");
    }
    free(w);
  }
  dt_set_isa(DT_ISA_AUTO);
  free(x);
  free(y);
  free(deq);
  free(yb1);
  free(yb2);
  return failed;
}
