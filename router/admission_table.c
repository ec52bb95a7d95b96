/* router/admission_table.c — this router's local request entries: a hash table keyed by ticket,
 * lookups by lease id, and snapshots by state. See admission_internal.h. */
#include "router/admission_internal.h"

#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

static size_t hash_ticket(uint64_t t, size_t nb) { return (size_t)((t * 0x9E3779B97F4A7C15ull) >> 20) & (nb - 1); }

adm__ent_t *adm__find(const adm_t *adm, uint64_t t) {
  for (adm__ent_t *e = adm->buckets[hash_ticket(t, adm->nbuckets)]; e; e = e->next)
    if (e->ticket == t) return e;
  return NULL;
}

int adm__insert(adm_t *adm, adm__ent_t *e) {
  if (adm->nents + 1 > adm->nbuckets) {
    size_t nb = adm->nbuckets * 2;
    adm__ent_t **b = calloc(nb, sizeof *b);
    if (!b) return GT_ENOMEM;
    for (size_t i = 0; i < adm->nbuckets; i++) {
      for (adm__ent_t *x = adm->buckets[i], *nx; x; x = nx) {
        nx = x->next;
        size_t h = hash_ticket(x->ticket, nb);
        x->next = b[h];
        b[h] = x;
      }
    }
    free(adm->buckets);
    adm->buckets = b;
    adm->nbuckets = nb;
  }
  size_t h = hash_ticket(e->ticket, adm->nbuckets);
  e->next = adm->buckets[h];
  adm->buckets[h] = e;
  adm->nents++;
  return GT_OK;
}

void adm__unlink_ent(adm_t *adm, adm__ent_t *e) {
  for (adm__ent_t **p = &adm->buckets[hash_ticket(e->ticket, adm->nbuckets)]; *p; p = &(*p)->next) {
    if (*p == e) {
      *p = e->next;
      adm->nents--;
      return;
    }
  }
}

void adm__ent_free(adm__ent_t *e) {
  if (!e) return;
  if (e->timer) event_free(e->timer);
  free(e->id);
  free(e->model);
  free(e->tenant);
  free(e->rid);
  free(e);
}

/* Ticket of a lease id of this instance, or 0. */
uint64_t adm__parse_id(const adm_t *adm, const char *id) {
  size_t n = strlen(adm->inst);
  if (strncmp(id, adm->inst, n) != 0 || id[n] != ':') return 0;
  char *end;
  unsigned long long t = strtoull(id + n + 1, &end, 10);
  if (*end || end == id + n + 1) return 0;
  return (uint64_t)t;
}

static int cmp_ticket(const void *a, const void *b) {
  uint64_t x = (*(adm__ent_t *const *)a)->ticket, y = (*(adm__ent_t *const *)b)->ticket;
  return x < y ? -1 : x > y;
}

/* Entries in one of the given states, sorted by ticket (request order). Caller frees. */
adm__ent_t **adm__collect(adm_t *adm, unsigned state_mask, size_t *n) {
  adm__ent_t **v = malloc((adm->nents + 1) * sizeof *v);
  *n = 0;
  if (!v) return NULL;
  for (size_t i = 0; i < adm->nbuckets; i++)
    for (adm__ent_t *e = adm->buckets[i]; e; e = e->next)
      if (state_mask & (1u << e->state)) v[(*n)++] = e;
  qsort(v, *n, sizeof *v, cmp_ticket);
  return v;
}
