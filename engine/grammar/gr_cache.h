/* engine/grammar/gr_cache.h — the shared automaton behind matchers (internal to engine/grammar).
 * Every function here requires c->lock held by the caller, except gr_cache_ref/unref. */
#ifndef GANTRY_ENGINE_GR_CACHE_H
#define GANTRY_ENGINE_GR_CACHE_H

#include <stdint.h>

#include "engine/grammar/gr_internal.h"
#include "engine/grammar/gr_vocab.h"

enum { T_UNKNOWN = -2, T_DEAD = -1, T_ERROR = -3 };

/* The start state's id. */
int32_t gr_cache_start(const gr_cache_t *c);
/* The state after byte from state sid: an id, T_DEAD, or T_ERROR (see gr_cache_error). */
int32_t gr_cache_step(gr_cache_t *c, int32_t sid, unsigned byte);
/* The state after bytes: an id, T_DEAD, or T_ERROR. */
int32_t gr_cache_run(gr_cache_t *c, int32_t sid, const unsigned char *p, size_t len);
/* Fills mask[n_words] for state sid (cached after the first time; *hit says which) and returns
 * the allowed count, or a negative GT_E* code (mask zeroed). *visits += trie nodes visited. */
int gr_cache_mask(gr_cache_t *c, int32_t sid, uint32_t *mask, int *hit, size_t *visits);
int gr_cache_accepting(const gr_cache_t *c, int32_t sid);
int gr_cache_done(const gr_cache_t *c, int32_t sid);
int gr_cache_error(const gr_cache_t *c); /* GT_ENOMEM / GT_ERANGE behind the last T_ERROR */
const gr_vocab_t *gr_cache_vocab(const gr_cache_t *c);
void gr_cache_lock(gr_cache_t *c);
void gr_cache_unlock(gr_cache_t *c);
void gr_cache_ref(gr_cache_t *c);
void gr_cache_sizes(gr_cache_t *c, size_t *n_states, size_t *n_nodes);

#endif
