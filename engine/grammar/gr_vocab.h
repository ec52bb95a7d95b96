/* engine/grammar/gr_vocab.h — the vocabulary trie (internal to engine/grammar). */
#ifndef GANTRY_ENGINE_GR_VOCAB_H
#define GANTRY_ENGINE_GR_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "engine/grammar/grammar.h"

/* Trie nodes in preorder (children in byte order, node i's subtree is [i, skip[i])); the root
 * is implicit (depth 0). Node i consumes byte[i] at depth[i] (1-based) and ends the pieces of
 * toks[tok_first[i] .. + tok_count[i]); the tokens of node i's whole subtree are
 * toks[tok_first[i] .. tok_first[skip[i]]). */
struct gr_vocab {
  size_t n_vocab, n_words;
  int32_t ends[GR_MAX_END_TOKENS]; /* end-of-generation ids: allowed iff accepting */
  size_t n_ends;
  size_t n_nodes, n_trie_tokens, max_depth;
  uint8_t *byte;            /* [n_nodes] */
  uint16_t *depth;          /* [n_nodes] */
  int32_t *skip;            /* [n_nodes] */
  int32_t *tok_first;       /* [n_nodes + 1] */
  uint8_t *text_sub;        /* [n_nodes]: node i starts a character (its parent's path is whole
                             * characters) and every path below it is plain text (gr_text_next
                             * never GR_TEXT_BAD) */
  uint16_t *tok_count;      /* [n_nodes] */
  int32_t *toks;            /* [n_trie_tokens] */
  char *blob;               /* all pieces */
  uint32_t *piece_off, *piece_len; /* [n_vocab] */
  uint8_t *in_trie;         /* [n_vocab]: 1 = may be generated under a grammar */
};

/* Plain text: printable ASCII but '"' and '\\', and well-formed UTF-8 (Unicode table 3-7). A
 * state that loops back to itself over every plain character (inside a JSON string, say)
 * allows every token whose bytes are plain text or a prefix of it: the mask walk takes such
 * trie subtrees whole. */
static inline int gr_byte_plain(unsigned b) { return b >= 0x20 && b < 0x7F && b != '"' && b != '\\'; }

/* Decoder state after a byte: GR_TEXT_START between characters, GR_TEXT_BAD for anything not
 * plain text, else (bytes still needed << 16 | next byte's lowest << 8 | highest). */
#define GR_TEXT_START 0u
#define GR_TEXT_BAD 0xFFFFFFFFu
static inline uint32_t gr_text_next(uint32_t st, unsigned b) {
  if (st == GR_TEXT_BAD) return GR_TEXT_BAD;
  if (st == GR_TEXT_START) {
    if (b < 0x80) return gr_byte_plain(b) ? GR_TEXT_START : GR_TEXT_BAD;
    if (b >= 0xC2 && b <= 0xDF) return 1u << 16 | 0x80 << 8 | 0xBF;
    if (b == 0xE0) return 2u << 16 | 0xA0 << 8 | 0xBF;
    if (b == 0xED) return 2u << 16 | 0x80 << 8 | 0x9F;
    if (b >= 0xE1 && b <= 0xEF) return 2u << 16 | 0x80 << 8 | 0xBF;
    if (b == 0xF0) return 3u << 16 | 0x90 << 8 | 0xBF;
    if (b >= 0xF1 && b <= 0xF3) return 3u << 16 | 0x80 << 8 | 0xBF;
    if (b == 0xF4) return 3u << 16 | 0x80 << 8 | 0x8F;
    return GR_TEXT_BAD;
  }
  unsigned rem = st >> 16, lo = (st >> 8) & 0xFF, hi = st & 0xFF;
  if (b < lo || b > hi) return GR_TEXT_BAD;
  return rem == 1 ? GR_TEXT_START : ((rem - 1) << 16 | 0x80 << 8 | 0xBF);
}

int gr_vocab_is_end(const gr_vocab_t *v, int32_t id); /* id is an end-of-generation token */

#endif
