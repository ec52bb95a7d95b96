/* format/tok_utf8.h — UTF-8 scanning and GPT-2's byte <-> unicode alphabet (tokenizer internals).
 *
 * Validation follows Unicode's definition of well-formed UTF-8 (no overlongs, no surrogates,
 * nothing above U+10FFFF). The lossy scan replaces each maximal ill-formed subpart with one
 * U+FFFD, the practice of the Unicode standard (ch. 3, "U+FFFD substitution of maximal
 * subparts") and of Rust's String::from_utf8_lossy, which HF tokenizers uses when decoding. */
#ifndef GANTRY_ENGINE_TOK_UTF8_H
#define GANTRY_ENGINE_TOK_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Result of tok_utf8_next at p[0..n): n > 0 required. */
enum {
  TOK_UTF8_INCOMPLETE = 0, /* p[0..n) is a valid but truncated prefix of one character */
  TOK_UTF8_INVALID = -1,   /* *adv bytes (>= 1) form a maximal ill-formed subpart */
};

/* Scans one character at p (n >= 1 bytes available). Returns its length (1..4, *cp set) when
 * well formed, TOK_UTF8_INCOMPLETE when p[0..n) could still become one, or TOK_UTF8_INVALID
 * with *adv = bytes to replace by one U+FFFD. */
int tok_utf8_next(const unsigned char *p, size_t n, uint32_t *cp, size_t *adv);

/* Offset of the first ill-formed byte of s[0..n), or n when all of it is well formed
 * (a truncated last character counts as ill formed). */
size_t tok_utf8_invalid_at(const char *s, size_t n);

/* Writes cp (<= 0x10FFFF, not a surrogate) as UTF-8 into out (4 bytes room); returns length. */
int tok_utf8_put(uint32_t cp, char *out);

/* GPT-2 byte-level alphabet: byte b is written as the code point tok_byte_to_cp(b);
 * printable Latin-1 bytes (0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF) map to themselves, the other 68
 * bytes to U+0100 + their rank among them. tok_cp_to_byte is the inverse (-1 if cp is not in
 * the alphabet). */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp);

#endif
