/* router/mailbox.c — cross-thread hand-off to the libevent loop: a locked FIFO + an eventfd. */
#include <event2/event.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "router/mailbox.h"

typedef struct item {
  mbox_fn fn;
  void *a, *b;
  intptr_t c;
  struct item *next;
} item_t;

struct mbox {
  int fd;
  struct event *ev;
  pthread_mutex_t mu;
  item_t *head, *tail;
};

void mbox_drain(mbox_t *m) {
  pthread_mutex_lock(&m->mu);
  item_t *it = m->head;
  m->head = m->tail = NULL;
  pthread_mutex_unlock(&m->mu);
  while (it) {
    item_t *next = it->next;
    it->fn(it->a, it->b, it->c);
    free(it);
    it = next;
  }
}

static void on_ready(evutil_socket_t fd, short what, void *arg) {
  (void)what;
  uint64_t v;
  if (read(fd, &v, sizeof v) < 0) { /* EAGAIN: nothing new */ }
  mbox_drain(arg);
}

mbox_t *mbox_create(struct event_base *base, gt_err_t *err) {
  mbox_t *m = calloc(1, sizeof *m);
  if (!m) {
    gt_err_set(err, GT_ENOMEM, "mailbox: out of memory");
    return NULL;
  }
  m->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (m->fd < 0) {
    free(m);
    gt_err_set(err, GT_EIO, "mailbox: eventfd failed");
    return NULL;
  }
  pthread_mutex_init(&m->mu, NULL);
  m->ev = event_new(base, m->fd, EV_READ | EV_PERSIST, on_ready, m);
  if (!m->ev || event_add(m->ev, NULL)) {
    mbox_destroy(m);
    gt_err_set(err, GT_EIO, "mailbox: event_add failed");
    return NULL;
  }
  return m;
}

int mbox_post(mbox_t *m, mbox_fn fn, void *a, void *b, intptr_t c) {
  item_t *it = malloc(sizeof *it);
  if (!it) return -1;
  *it = (item_t){fn, a, b, c, NULL};
  pthread_mutex_lock(&m->mu);
  if (m->tail) m->tail->next = it;
  else m->head = it;
  m->tail = it;
  pthread_mutex_unlock(&m->mu);
  uint64_t one = 1;
  if (write(m->fd, &one, sizeof one) < 0) { /* counter saturated: a wake-up is pending anyway */ }
  return 0;
}

/* Drops queued items without running them. */
void mbox_destroy(mbox_t *m) {
  if (!m) return;
  if (m->ev) event_free(m->ev);
  close(m->fd);
  item_t *it = m->head;
  while (it) {
    item_t *n = it->next;
    free(it);
    it = n;
  }
  pthread_mutex_destroy(&m->mu);
  free(m);
}
