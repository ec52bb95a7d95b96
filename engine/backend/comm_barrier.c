/* engine/backend/comm_barrier.c — see comm_barrier.h. */
#include "engine/backend/comm_barrier.h"

#include <limits.h>

void comm_barrier_init(comm_barrier_t *b, int n) {
  pthread_mutex_init(&b->mu, NULL);
  pthread_cond_init(&b->cv, NULL);
  b->n = n;
  b->waiting = 0;
  b->gen = 0;
  b->aborted = 0;
  b->acc = b->agreed = INT_MIN;
}

void comm_barrier_destroy(comm_barrier_t *b) {
  pthread_mutex_destroy(&b->mu);
  pthread_cond_destroy(&b->cv);
}

int comm_barrier_wait(comm_barrier_t *b, int value, int *agreed) {
  pthread_mutex_lock(&b->mu);
  if (b->aborted) {
    pthread_mutex_unlock(&b->mu);
    return -1;
  }
  const unsigned long g = b->gen;
  if (value > b->acc) b->acc = value;
  if (++b->waiting == b->n) {
    b->waiting = 0;
    b->agreed = b->acc;
    b->acc = INT_MIN;
    b->gen++;
    pthread_cond_broadcast(&b->cv);
  } else {
    while (g == b->gen && !b->aborted) pthread_cond_wait(&b->cv, &b->mu);
  }
  const int rc = g == b->gen ? -1 : 0; /* woken by abort, not by the last thread */
  if (!rc && agreed) *agreed = b->agreed; /* the next round cannot complete before this thread joins it */
  pthread_mutex_unlock(&b->mu);
  return rc;
}

void comm_barrier_abort(comm_barrier_t *b) {
  pthread_mutex_lock(&b->mu);
  b->aborted = 1;
  pthread_cond_broadcast(&b->cv);
  pthread_mutex_unlock(&b->mu);
}

int comm_barrier_aborted(comm_barrier_t *b) {
  pthread_mutex_lock(&b->mu);
  const int a = b->aborted;
  pthread_mutex_unlock(&b->mu);
  return a;
}
