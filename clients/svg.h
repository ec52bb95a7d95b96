/* clients/svg.h — small self-contained SVG line charts (no external plotting program). */
#ifndef GANTRY_CLIENTS_SVG_H
#define GANTRY_CLIENTS_SVG_H

#include <stdio.h>

#define GC_SVG_MAX_PTS 64
#define GC_SVG_OUTLIER_RATIO 10.0
typedef struct gc_series {
  char name[96];
  int n;                       /* points, in x order as given */
  double x[GC_SVG_MAX_PTS], y[GC_SVG_MAX_PTS]; /* y < 0 = missing (not drawn) */
} gc_series_t;

/* Writes one chart: lines with point markers, one per series, legend on the right, x ticks at
 * the data's x values (log2 axis when logx), y from 0 to a rounded maximum. Robust y axis: when
 * the highest points (at most a quarter of them, at least one) stand GC_SVG_OUTLIER_RATIO times
 * or more above the next highest, the axis ends above the rest and those points are drawn
 * on the top edge as triangles labelled with their true values, with a note under the title;
 * one bad cell never flattens every other line. Missing (y < 0) and non-finite y are skipped. */
void gc_svg_plot(FILE *f, const char *title, const char *xlabel, const char *ylabel, const gc_series_t *s,
                 int ns, int logx);

/* The y value above which gc_svg_plot clips (see above) for these series, or -1 when no point
 * is an outlier. */
double gc_svg_clip_level(const gc_series_t *s, int ns);

/* Adds (x, y) to s, keeping points sorted by x; ignored when s is full. */
void gc_series_add(gc_series_t *s, double x, double y);

#endif
