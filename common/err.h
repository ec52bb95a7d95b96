/* common/err.h — errors are values.
 * Library functions return GT_OK (0) or a negative GT_E* code and, when given a gt_err_t*,
 * fill it with a one-line message naming the problem. They never exit or print. */
#ifndef GANTRY_COMMON_ERR_H
#define GANTRY_COMMON_ERR_H

#include <stddef.h>

enum {
  GT_OK = 0,
  GT_EINVAL = -1,       /* bad argument or request */
  GT_ENOMEM = -2,       /* allocation failed */
  GT_EIO = -3,          /* open/read/write/mmap failed */
  GT_EFORMAT = -4,      /* malformed or hostile file / data */
  GT_ERANGE = -5,       /* value out of range (e.g. prompt longer than context) */
  GT_EUNSUPPORTED = -6, /* valid but not supported (unknown arch, template, type) */
  GT_ENOTFOUND = -7,    /* key / tensor / token not present */
  GT_EINTERNAL = -8,    /* bug or backend failure */
  GT_EBUSY = -9,        /* resource exhausted / queue full */
  GT_ECANCELLED = -10,  /* cancelled by the caller */
};

typedef struct gt_err {
  int code;
  char msg[512];
  char param[48]; /* the request field a bad-request error is about, as its proto path
                     ("logit_bias", "sampling.temperature"); "" if none (gt_err_set_param) */
} gt_err_t;

/* Formats msg into *e (if e is non-NULL) and returns code, so callers can write
 * `return gt_err_set(err, GT_EFORMAT, "tensor %s: offset %llu past end", ...);` */
int gt_err_set(gt_err_t *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* gt_err_set that also names the request field the error is about (copied into e->param). */
int gt_err_set_param(gt_err_t *e, int code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Prepends "prefix: " to an existing message (for adding context while unwinding). */
int gt_err_wrap(gt_err_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Static name of a code ("EFORMAT", ...). */
const char *gt_err_name(int code);

#endif
