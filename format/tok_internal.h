/* format/tok_internal.h — the tok_t layout shared by the tokenizer's files (not a public header). */
#ifndef GANTRY_ENGINE_TOK_INTERNAL_H
#define GANTRY_ENGINE_TOK_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "format/tok_pretok.h"
#include "format/tokenizer.h"

/* Merge table entry: the pair (left id, right id) merges into `result` with priority `rank`. */
typedef struct {
  uint64_t key; /* (uint64_t)left << 32 | right; TOK_EMPTY_KEY when the slot is free */
  int32_t rank;
  int32_t result;
} tok_merge_t;
#define TOK_EMPTY_KEY UINT64_MAX

/* Word cache: direct-mapped, one word per slot, words up to TOK_CACHE_WORD bytes that encode to
 * at most TOK_CACHE_IDS tokens. */
#define TOK_CACHE_SLOTS 16384
#define TOK_CACHE_WORD 40
#define TOK_CACHE_IDS 12
typedef struct {
  uint64_t hash;
  uint8_t wlen; /* 0 = empty */
  uint8_t nids;
  char word[TOK_CACHE_WORD];
  int32_t ids[TOK_CACHE_IDS];
} tok_cache_slot_t;

struct tok {
  size_t n_vocab;
  char *text;              /* vocab texts, each NUL-terminated */
  size_t *text_off;        /* (n_vocab + 1) offsets into text; len = off[i+1] - off[i] - 1 */
  char *piece;             /* decoded bytes of every token, back to back */
  size_t *piece_off;       /* (n_vocab + 1) offsets into piece */
  uint8_t *type;           /* (n_vocab) tok_type_t */

  uint32_t *vmap;          /* text -> id + 1 (0 = free), open addressing; normal tokens win */
  size_t vmap_mask;
  tok_merge_t *mmap;       /* (left, right) -> merge, open addressing */
  size_t mmap_mask;
  size_t n_merges;
  int32_t byte_id[256];    /* token of each single byte */

  int32_t *special;        /* matchable control / user-defined ids, by first byte then longest */
  size_t n_special;
  uint32_t special_at[257]; /* special[special_at[b] .. special_at[b+1]) start with byte b */

  tok_pretok_t *pre;
  int32_t bos, eos, eot, pad;

  pthread_mutex_t cache_mu;
  tok_cache_slot_t *cache; /* TOK_CACHE_SLOTS */
};

static inline size_t tok_text_len(const tok_t *t, int32_t id) {
  return t->text_off[id + 1] - t->text_off[id] - 1;
}

/* Hash of n bytes (also used for the word cache). */
uint64_t tok_hash(const void *p, size_t n);

/* Scratch for BPE and word splitting, reused across the words of one tok_encode call. */
typedef struct {
  int32_t *id, *next, *prev; /* per symbol */
  size_t cap;
  uint64_t *tree;            /* long words: min segment tree, 2 * n keys */
  size_t tree_cap;
} tok_bpe_work_t;

/* Builds the vocab and merge hash tables of t (text, type and n_vocab already set). */
int tok_bpe_build(tok_t *t, const tok_spec_t *spec, gt_err_t *err);
/* Encodes one pre-tokenized word (raw bytes) and appends its ids to *ids (growable, *n / *cap).
 * Uses and fills the word cache. */
int tok_bpe_word(const tok_t *t, tok_bpe_work_t *w, const char *word, size_t n, int32_t **ids, size_t *nids,
                 size_t *cap, gt_err_t *err);
void tok_bpe_work_free(tok_bpe_work_t *w);
/* Id of vocab text s[0..n), normal tokens first; -1 if none. */
int32_t tok_vmap_find(const tok_t *t, const char *s, size_t n);

/* Appends v to the growable id array. */
int tok_ids_push(int32_t **ids, size_t *n, size_t *cap, int32_t v);

#endif
