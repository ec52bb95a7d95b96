#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

gt_level_t gt_log_level = GT_LEVEL_INFO;

void gt_log_init_from_env(void) {
  const char *v = getenv("GANTRY_LOG");
  if (!v) return;
  static const char *names[] = {"debug", "info", "warn", "error", "off"};
  for (int i = 0; i < 5; i++)
    if (strcmp(v, names[i]) == 0) gt_log_level = (gt_level_t)i;
}

void gt_log_write(gt_level_t lvl, const char *fmt, ...) {
  static const char *tags[] = {"DEBUG", "INFO", "WARN", "ERROR", "OFF"};
  char line[2048];
  struct timeval tv;
  gettimeofday(&tv, NULL);
  struct tm tm;
  gmtime_r(&tv.tv_sec, &tm);
  int n = (int)strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
  n += snprintf(line + n, sizeof line - (size_t)n, ".%03dZ %s ", (int)(tv.tv_usec / 1000), tags[lvl]);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  va_end(ap);
  fprintf(stderr, "%s\n", line); /* one write per line keeps lines whole across threads */
}
