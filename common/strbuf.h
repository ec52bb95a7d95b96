/* common/strbuf.h — a growable NUL-terminated byte string (engine, router and clients share it).
 *
 * Zero-initialise: gt_sb_t b = {0}. After any successful append p != NULL and p[len] == 0 (an
 * append of 0 bytes allocates too, so an empty result is ""). p is malloc'd; the buffer owns it
 * until the caller takes it (b.p, then free it) or calls gt_sb_free. Setting len = 0 empties it
 * for reuse (p[0] is then stale until the next append). */
#ifndef GANTRY_COMMON_STRBUF_H
#define GANTRY_COMMON_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct gt_sb {
  char *p;
  size_t len, cap;
  bool oom; /* an append failed for lack of memory (stays set until gt_sb_free) */
} gt_sb_t;

/* Appends s[0..n) (s may be NULL when n == 0). Returns 0, or -1 when memory runs out: then the
 * buffer is unchanged and oom is set, so a run of appends can be checked once at the end. */
int gt_sb_add(gt_sb_t *b, const char *s, size_t n);
/* gt_sb_add of a C string / of one byte. */
int gt_sb_adds(gt_sb_t *b, const char *s);
int gt_sb_addc(gt_sb_t *b, char c);
/* Appends printf(fmt, ...); 0, or -1 (buffer unchanged, oom set) when memory runs out or the
 * format fails. */
int gt_sb_printf(gt_sb_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Room for n more bytes without another allocation (one realloc to exactly len + n + 1 when
 * needed, where appends grow by doubling); 0, or -1 (buffer unchanged, oom set). */
int gt_sb_reserve(gt_sb_t *b, size_t n);
/* Frees p and zeroes the buffer (reusable after). */
void gt_sb_free(gt_sb_t *b);

#endif
