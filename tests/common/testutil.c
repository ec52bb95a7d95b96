#include "tests/common/testutil.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

const char *tu_golden(const char *rel) {
  static char buf[4096];
  const char *dir = getenv("GANTRY_GOLDEN");
  snprintf(buf, sizeof buf, "%s/%s", dir ? dir : "tests/golden", rel);
  return buf;
}

const char *tu_bin(const char *name) {
  static char buf[4096];
  const char *dir = getenv("GANTRY_BIN");
  snprintf(buf, sizeof buf, "%s/%s", dir ? dir : ".", name);
  return buf;
}

void *tu_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  if (buf) {
    buf[n] = 0;
    if (len) *len = (size_t)n;
  }
  return buf;
}

json_t *tu_json(const char *rel) {
  json_error_t je;
  json_t *j = json_load_file(tu_golden(rel), 0, &je);
  if (!j) fail_msg("cannot parse %s: %s (line %d)", tu_golden(rel), je.text, je.line);
  return j;
}

int tu_argmax(const float *x, int n) {
  int best = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[best]) best = i;
  return best;
}

double tu_max_row_rel_err(const float *out, const float *ref, int rows, int n) {
  double worst = 0;
  for (int r = 0; r < rows; r++) {
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
      double d = (double)out[(size_t)r * n + i] - ref[(size_t)r * n + i];
      num += d * d;
      den += (double)ref[(size_t)r * n + i] * ref[(size_t)r * n + i];
    }
    double e = sqrt(num) / (sqrt(den) > 0 ? sqrt(den) : 1);
    if (e > worst || isnan(e)) worst = isnan(e) ? INFINITY : e;
  }
  return worst;
}

int tu_run(const char *cmd, char **out) {
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  size_t n;
  while ((n = fread(buf + len, 1, cap - len - 1, p)) > 0) {
    len += n;
    if (cap - len < 2) buf = realloc(buf, cap *= 2);
  }
  buf[len] = 0;
  int st = pclose(p);
  if (out) *out = buf; else free(buf);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
