/* router/mailbox.h — hand-off from gRPC threads to the loop thread (eventfd + locked list). */
#ifndef GANTRY_ROUTER_MAILBOX_H
#define GANTRY_ROUTER_MAILBOX_H

#include <stdint.h>
#include "common/err.h"

struct event_base;
typedef struct mbox mbox_t;
typedef void (*mbox_fn)(void *a, void *b, intptr_t c);
mbox_t *mbox_create(struct event_base *base, gt_err_t *err);
/* Any thread: runs fn(a, b, c) on the loop thread soon, in post order. 0 or -1 (OOM). */
int mbox_post(mbox_t *m, mbox_fn fn, void *a, void *b, intptr_t c);
/* Runs what is queued now (loop thread; also used at shutdown). */
void mbox_drain(mbox_t *m);
void mbox_destroy(mbox_t *m);

#endif
