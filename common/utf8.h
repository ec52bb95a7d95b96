/* common/utf8.h — UTF-8 validation and scanning (tokenizer, chat, router share it).
 *
 * Well formed means Unicode's definition: no overlong forms, no surrogates (U+D800..DFFF),
 * nothing above U+10FFFF, no truncated last character. gt_utf8_next also tells a truncated
 * character (more bytes may complete it) from an ill-formed one, and for the latter how many
 * bytes form its maximal ill-formed subpart, which a lossy decoder replaces by one U+FFFD (the
 * practice of the Unicode standard, ch. 3, and of Rust's String::from_utf8_lossy). */
#ifndef GANTRY_COMMON_UTF8_H
#define GANTRY_COMMON_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Results of gt_utf8_next besides a length. */
enum {
  GT_UTF8_INCOMPLETE = 0, /* p[0..n) is a valid but truncated prefix of one character */
  GT_UTF8_INVALID = -1,   /* *adv bytes (>= 1) form a maximal ill-formed subpart */
};

/* Scans one character at p (n >= 1 bytes available). Returns its length (1..4, *cp set) when
 * well formed, GT_UTF8_INCOMPLETE when p[0..n) could still become one, or GT_UTF8_INVALID with
 * *adv = bytes to replace by one U+FFFD. */
int gt_utf8_next(const unsigned char *p, size_t n, uint32_t *cp, size_t *adv);

/* Offset of the first ill-formed byte of s[0..n), or n when all of it is well formed (a
 * truncated last character counts as ill formed). */
size_t gt_utf8_invalid_at(const char *s, size_t n);

/* s[0..n) is well formed. */
bool gt_utf8_valid(const char *s, size_t n);

/* Length of the longest prefix of s[0..n) that does not end inside a character: n, less the
 * bytes of a truncated (but so far valid) last character. Ill-formed bytes count as complete. */
size_t gt_utf8_complete_len(const char *s, size_t n);

/* Writes cp (<= 0x10FFFF, not a surrogate) as UTF-8 into out (4 bytes room); returns length. */
int gt_utf8_put(uint32_t cp, char *out);

#endif
