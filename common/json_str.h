/* common/json_str.h — JSON string literals written straight into a byte buffer, for bodies too
 * large to build as a jansson tree first (the router's non-streaming responses).
 *
 * The output is what jansson's json_dumps writes for json_stringn(s, n) (default flags): the
 * quotes, `"` and `\` escaped, \b \f \n \r \t in their short forms, other bytes below 0x20 as
 * \u00XX, everything else as it is. Input need not be valid UTF-8: each maximal ill-formed
 * subpart becomes one U+FFFD (common/utf8.h), where jansson would refuse the string. */
#ifndef GANTRY_COMMON_JSON_STR_H
#define GANTRY_COMMON_JSON_STR_H

#include <stddef.h>

#include "common/strbuf.h"

/* Appends s[0..n) as a JSON string literal; 0, or -1 (oom set) when memory runs out. */
int gt_sb_add_json_str(gt_sb_t *b, const char *s, size_t n);
/* Appends s[0..n) escaped as above, without the quotes (a piece of a longer literal). */
int gt_sb_add_json_chars(gt_sb_t *b, const char *s, size_t n);
/* Bytes gt_sb_add_json_chars appends for s[0..n) (the literal is 2 more). */
size_t gt_json_chars_len(const char *s, size_t n);

#endif
