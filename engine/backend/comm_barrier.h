/* engine/backend/comm_barrier.h — an abortable barrier of the n host threads of a communicator's
 * ranks (engine/backend/comm.h), which also agrees on a value: every thread brings one and all
 * leave with the largest. The CPU communicator separates the phases of its all-reduce with it; the
 * device-local one (comm_local.c) uses it for its rendezvous and for the ranks' agreement on how a
 * decode step runs. */
#ifndef GANTRY_ENGINE_COMM_BARRIER_H
#define GANTRY_ENGINE_COMM_BARRIER_H

#include <pthread.h>

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int n;                /* threads that meet */
  int waiting;          /* inside the current round */
  unsigned long gen;    /* round number */
  int aborted;
  int acc, agreed;      /* the largest value of the current round; of the last completed round */
} comm_barrier_t;

void comm_barrier_init(comm_barrier_t *b, int n);
void comm_barrier_destroy(comm_barrier_t *b);
/* Waits until all n threads arrived; *agreed (may be NULL) = the largest `value` they brought.
 * 0, or -1 once aborted (also for a thread waiting when comm_barrier_abort is called). */
int comm_barrier_wait(comm_barrier_t *b, int value, int *agreed);
/* Any thread: every waiting and later comm_barrier_wait returns -1. */
void comm_barrier_abort(comm_barrier_t *b);
int comm_barrier_aborted(comm_barrier_t *b);

#endif
