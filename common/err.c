#include "common/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static void err_vset(gt_err_t *e, int code, const char *param, const char *fmt, va_list ap) {
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  e->code = code;
  snprintf(e->param, sizeof e->param, "%s", param ? param : "");
}

int gt_err_set(gt_err_t *e, int code, const char *fmt, ...) {
  if (e) {
    va_list ap;
    va_start(ap, fmt);
    err_vset(e, code, NULL, fmt, ap);
    va_end(ap);
  }
  return code;
}

int gt_err_set_param(gt_err_t *e, int code, const char *param, const char *fmt, ...) {
  if (e) {
    va_list ap;
    va_start(ap, fmt);
    err_vset(e, code, param, fmt, ap);
    va_end(ap);
  }
  return code;
}

int gt_err_wrap(gt_err_t *e, const char *fmt, ...) {
  if (!e) return GT_EINTERNAL;
  char prefix[256], old[sizeof e->msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, e->msg, sizeof old);
  size_t n = strlen(prefix);
  if (n > sizeof e->msg - 3) n = sizeof e->msg - 3;
  memcpy(e->msg, prefix, n);
  memcpy(e->msg + n, ": ", 2);
  size_t room = sizeof e->msg - n - 3;
  size_t m = strnlen(old, room);
  memcpy(e->msg + n + 2, old, m);
  e->msg[n + 2 + m] = 0;
  return e->code;
}

const char *gt_err_name(int code) {
  switch (code) {
    case GT_OK: return "OK";
    case GT_EINVAL: return "EINVAL";
    case GT_ENOMEM: return "ENOMEM";
    case GT_EIO: return "EIO";
    case GT_EFORMAT: return "EFORMAT";
    case GT_ERANGE: return "ERANGE";
    case GT_EUNSUPPORTED: return "EUNSUPPORTED";
    case GT_ENOTFOUND: return "ENOTFOUND";
    case GT_EINTERNAL: return "EINTERNAL";
    case GT_EBUSY: return "EBUSY";
    case GT_ECANCELLED: return "ECANCELLED";
    default: return "E?";
  }
}
