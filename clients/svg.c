/* clients/svg.c — line charts as SVG text. */
#include "clients/svg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { W = 760, H = 440, ML = 70, MR = 230, MT = 40, MB = 56 };
static const char *colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                               "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

void gc_series_add(gc_series_t *s, double x, double y) {
  if (s->n >= GC_SVG_MAX_PTS) return;
  int i = s->n++;
  while (i > 0 && s->x[i - 1] > x) {
    s->x[i] = s->x[i - 1];
    s->y[i] = s->y[i - 1];
    i--;
  }
  s->x[i] = x;
  s->y[i] = y;
}

static void esc(FILE *f, const char *t) {
  for (; *t; t++) {
    switch (*t) {
      case '<': fputs("&lt;", f); break;
      case '>': fputs("&gt;", f); break;
      case '&': fputs("&amp;", f); break;
      case '"': fputs("&quot;", f); break;
      default: fputc(*t, f);
    }
  }
}

static double nice_ceil(double v) {
  if (v <= 0) return 1;
  double p = pow(10, floor(log10(v)));
  double m = v / p;
  static const double steps[] = {1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10};
  double n = 10;
  for (int i = 0; i < 10; i++)
    if (m <= steps[i]) {
      n = steps[i];
      break;
    }
  return n * p;
}

static int drawn(double y) { return y >= 0 && isfinite(y); }

static int cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double gc_svg_clip_level(const gc_series_t *s, int ns) {
  int n = 0;
  for (int i = 0; i < ns; i++) n += s[i].n;
  double *v = malloc((size_t)(n + 1) * sizeof *v);
  if (!v) return -1;
  n = 0;
  for (int i = 0; i < ns; i++)
    for (int k = 0; k < s[i].n; k++)
      if (drawn(s[i].y[k])) v[n++] = s[i].y[k];
  qsort(v, (size_t)n, sizeof *v, cmp_dbl);
  /* the widest jump among the top quarter (>= 1 point), if wide enough */
  double best = 0, level = -1;
  int kmax = n / 4 > 1 ? n / 4 : 1;
  for (int k = 1; k <= kmax && n - k - 1 >= 0; k++) {
    double lo = v[n - k - 1], hi = v[n - k];
    if (lo <= 0) break;
    if (hi / lo >= GC_SVG_OUTLIER_RATIO && hi / lo > best) best = hi / lo, level = lo;
  }
  free(v);
  return level;
}

void gc_svg_plot(FILE *f, const char *title, const char *xlabel, const char *ylabel, const gc_series_t *s,
                 int ns, int logx) {
  double xs[GC_SVG_MAX_PTS * 4];
  int nx = 0;
  double ymax = 0;
  double clip = gc_svg_clip_level(s, ns);
  int n_clipped = 0;
  for (int i = 0; i < ns; i++)
    for (int k = 0; k < s[i].n; k++) {
      if (drawn(s[i].y[k]) && clip >= 0 && s[i].y[k] > clip) n_clipped++;
      else if (drawn(s[i].y[k]) && s[i].y[k] > ymax) ymax = s[i].y[k];
      int seen = 0;
      for (int j = 0; j < nx; j++)
        if (xs[j] == s[i].x[k]) seen = 1;
      if (!seen && nx < (int)(sizeof xs / sizeof xs[0])) xs[nx++] = s[i].x[k];
    }
  double xmin = INFINITY, xmax = -INFINITY;
  for (int j = 0; j < nx; j++) {
    if (xs[j] < xmin) xmin = xs[j];
    if (xs[j] > xmax) xmax = xs[j];
  }
  if (nx == 0) xmin = 0, xmax = 1;
  if (logx && xmin <= 0) logx = 0;
  double a = logx ? log2(xmin) : xmin, b = logx ? log2(xmax) : xmax;
  if (b - a < 1e-12) a -= 1, b += 1;
  double ytop = nice_ceil(ymax * (n_clipped ? 1.15 : 1.05)); /* room for the markers */
  const int pw = W - ML - MR, ph = H - MT - MB;
#define PX(x) (ML + ((logx ? log2(x) : (x)) - a) / (b - a) * pw)
#define PY(y) (MT + ph - ((y) > ytop ? ytop : (y)) / ytop * ph)
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
             "font-family=\"sans-serif\" font-size=\"12\">\n", W, H, W, H);
  fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
  fprintf(f, "<text x=\"%d\" y=\"22\" font-size=\"15\" font-weight=\"bold\">", ML);
  esc(f, title);
  fprintf(f, "</text>\n");
  if (n_clipped)
    fprintf(f, "<text x=\"%d\" y=\"36\" font-size=\"11\" fill=\"#b00\">axis clipped at %g: %d point%s above "
               "%gx the rest, drawn as triangles with their values</text>\n",
            ML, ytop, n_clipped, n_clipped > 1 ? "s" : "", GC_SVG_OUTLIER_RATIO);
  /* grid + y ticks */
  for (int t = 0; t <= 5; t++) {
    double yv = ytop * t / 5, y = PY(yv);
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", ML, y, ML + pw, y);
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", ML - 6, y + 4, yv);
  }
  for (int j = 0; j < nx; j++) {
    double x = PX(xs[j]);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#eee\"/>\n", x, MT, x, MT + ph);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n", x, MT + ph + 16, xs[j]);
  }
  fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#333\"/>\n", ML, MT, pw, ph);
  fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">", ML + pw / 2, H - 12);
  esc(f, xlabel);
  fprintf(f, "%s</text>\n", logx ? " (log scale)" : "");
  fprintf(f, "<text x=\"16\" y=\"%d\" text-anchor=\"middle\" transform=\"rotate(-90 16 %d)\">", MT + ph / 2,
          MT + ph / 2);
  esc(f, ylabel);
  fprintf(f, "</text>\n");
  for (int i = 0; i < ns; i++) {
    const char *col = colors[i % 10];
    const char *dash = i >= 10 ? " stroke-dasharray=\"6 3\"" : "";
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", col, dash);
    for (int k = 0; k < s[i].n; k++)
      if (drawn(s[i].y[k])) fprintf(f, "%.1f,%.1f ", PX(s[i].x[k]), PY(s[i].y[k]));
    fprintf(f, "\"/>\n");
    for (int k = 0; k < s[i].n; k++) {
      double x = PX(s[i].x[k]), y = PY(s[i].y[k]);
      if (!drawn(s[i].y[k])) continue;
      if (s[i].y[k] > ytop) { /* clipped: a triangle on the top edge, labelled with the value */
        fprintf(f, "<path class=\"clipped\" d=\"M%.1f %.1f l-6 10 h12 z\" fill=\"%s\" stroke=\"#b00\"><title>%g, %.6g "
                   "(clipped)</title></path>\n", x, y - 2, col, s[i].x[k], s[i].y[k]);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"#b00\">%.6g</text>\n", x + 8, y + 10,
                s[i].y[k]);
      } else {
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>%g, %.4g</title></circle>\n", x, y,
                col, s[i].x[k], s[i].y[k]);
      }
    }
    int ly = MT + 8 + i * 18;
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"%s/>\n", W - MR + 16,
            ly, W - MR + 40, ly, col, dash);
    fprintf(f, "<text x=\"%d\" y=\"%d\">", W - MR + 46, ly + 4);
    esc(f, s[i].name);
    fprintf(f, "</text>\n");
  }
  fprintf(f, "</svg>\n");
#undef PX
#undef PY
}
