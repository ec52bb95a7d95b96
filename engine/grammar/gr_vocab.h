/* engine/grammar/gr_vocab.h — the vocabulary trie (internal to engine/grammar). */
#ifndef GANTRY_ENGINE_GR_VOCAB_H
#define GANTRY_ENGINE_GR_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "engine/grammar/grammar.h"

/* Trie nodes in preorder (children in byte order, node i's subtree is [i, skip[i])); the root
 * is implicit (depth 0). Node i consumes byte[i] at depth[i] (1-based) and ends the pieces of
 * toks[tok_first[i] .. + tok_count[i]). */
struct gr_vocab {
  size_t n_vocab, n_words;
  int32_t eos, eot;         /* -1 when absent */
  size_t n_nodes, n_trie_tokens, max_depth;
  uint8_t *byte;            /* [n_nodes] */
  uint16_t *depth;          /* [n_nodes] */
  int32_t *skip;            /* [n_nodes] */
  int32_t *tok_first;       /* [n_nodes] */
  uint16_t *tok_count;      /* [n_nodes] */
  int32_t *toks;            /* [n_trie_tokens] */
  char *blob;               /* all pieces */
  uint32_t *piece_off, *piece_len; /* [n_vocab] */
  uint8_t *in_trie;         /* [n_vocab]: 1 = may be generated under a grammar */
};

#endif
