/* format/tok_utf8.h — GPT-2's byte <-> unicode alphabet (tokenizer internals). UTF-8 scanning
 * and validation (gt_utf8_*) are in common/utf8.h, included here for the tokenizer's files; the
 * lossy decode replaces each maximal ill-formed subpart with one U+FFFD (gt_utf8_next), as Rust's
 * String::from_utf8_lossy does, which HF tokenizers uses when decoding. */
#ifndef GANTRY_ENGINE_TOK_UTF8_H
#define GANTRY_ENGINE_TOK_UTF8_H

#include <stddef.h>
#include <stdint.h>

#include "common/utf8.h"

/* GPT-2 byte-level alphabet: byte b is written as the code point tok_byte_to_cp(b);
 * printable Latin-1 bytes (0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF) map to themselves, the other 68
 * bytes to U+0100 + their rank among them. tok_cp_to_byte is the inverse (-1 if cp is not in
 * the alphabet). */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp);

#endif
