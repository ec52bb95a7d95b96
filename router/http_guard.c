/* router/http_guard.c — connection and framing limits of the HTTP front (see http_guard.h).
 *
 * How it sits under evhttp (libevent 2.1.12): the guard makes each connection's socket
 * bufferevent (bevcb) and keeps a reference on it, so the object outlives evhttp's
 * bufferevent_free; evhttp clears its callbacks when it frees it, which is how a periodic tick
 * (every GUARD_TICK_MS while connections are open) tells a closed connection from a live one.
 * A callback on the input buffer sees every byte as it is read, before evhttp parses it, and a
 * small parser follows the request head (lines, header count, Content-Length,
 * Transfer-Encoding). evhttp is "reading a request" while its read callback is set and EV_READ
 * is enabled; in between (the router answers) the guard keeps parsing what arrives (a pipelined
 * next request) but enforces nothing. To end a request, the tick calls evhttp's own event
 * callback with a bare BEV_EVENT_READING, which evhttp handles as a buffer error: it answers
 * with its 400 page and closes; the page rewrite (http_errpage) replaces it with the guard's
 * verdict (408, 431, 400, 429). A verdict found in a head that evhttp completed first reaches
 * the router through http_guard_request. */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "common/clock.h"
#include "common/log.h"
#include "router/http_errpage.h"
#include "router/http_guard.h"
#include "router/metrics.h"

#define GUARD_TICK_MS 100
#define GUARD_BUCKETS 1024     /* connection and address hash tables */
#define GUARD_LINE_KEEP 80     /* bytes kept of each head line (header names, Content-Length) */
#define GUARD_LOG_EVERY_MS 10000.0
#define GUARD_BACKOFF_MIN_MS 50
#define GUARD_BACKOFF_MAX_MS 1000

typedef struct gaddr {
  struct sockaddr_storage ss; /* port zeroed */
  int n;                      /* open connections from it */
  struct gaddr *next;
} gaddr_t;

typedef enum { PH_READ, PH_SERVE } phase_t;

typedef struct hconn {
  struct http_guard *g;
  struct bufferevent *bev; /* one reference held */
  struct hconn *prev, *next, *hnext;
  gaddr_t *addr;           /* NULL until adopted by the tick */
  struct event *rw;        /* the error-page rewrite (active when a page may have been written) */
  phase_t phase;           /* PH_SERVE: evhttp handed the request over; nothing enforced */
  /* the request being read */
  double t_start, t_head;  /* ms: its first byte, the end of its head (0: not yet) */
  long head_bytes;
  int n_lines, n_headers, line_len;
  char line[GUARD_LINE_KEEP];
  char last;               /* the last byte of the current line */
  bool in_body;            /* the head ended: what follows is body (not parsed) */
  bool cl_seen, te_seen;
  char cl[GUARD_LINE_KEEP];
  /* the verdict: 0 or the status to answer with */
  int verdict;
  oa_error_t err;
  bool killed;             /* evhttp was told to fail the request */
  bool nodelay;            /* TCP_NODELAY set on the socket */
  long served_bytes;       /* read while the router answered (PH_SERVE) */
} hconn_t;

struct http_guard {
  struct event_base *base;
  http_guard_cfg_t cfg;
  metrics_t *m;
  struct evconnlistener *lev;
  struct event *tick, *resume;
  hconn_t *conns, *tail; /* in accept order (addresses are counted in that order) */
  int n_conns;
  hconn_t *by_bev[GUARD_BUCKETS];
  gaddr_t *addrs[GUARD_BUCKETS];
  bool cap_paused;   /* listener disabled at max_conns */
  bool backoff;      /* listener disabled after an accept failure */
  int backoff_ms;
  long accept_fails; /* since the last log line */
  double last_log;
};

/* ---- tables ---- */
static unsigned ptr_bucket(const void *p) { return (unsigned)(((uintptr_t)p >> 4) * 2654435761u) % GUARD_BUCKETS; }

static unsigned addr_bucket(const struct sockaddr_storage *ss) {
  const unsigned char *b;
  size_t n;
  if (ss->ss_family == AF_INET6) {
    b = (const unsigned char *)&((const struct sockaddr_in6 *)ss)->sin6_addr;
    n = 16;
  } else {
    b = (const unsigned char *)&((const struct sockaddr_in *)ss)->sin_addr;
    n = 4;
  }
  unsigned h = 2166136261u;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 16777619u;
  return h % GUARD_BUCKETS;
}

static bool addr_eq(const struct sockaddr_storage *a, const struct sockaddr_storage *b) {
  if (a->ss_family != b->ss_family) return false;
  if (a->ss_family == AF_INET6)
    return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
  return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
}

static hconn_t *find_conn(http_guard_t *g, const struct bufferevent *bev) {
  for (hconn_t *c = g->by_bev[ptr_bucket(bev)]; c; c = c->hnext)
    if (c->bev == bev) return c;
  return NULL;
}

/* ---- listener ---- */
static void listener_update(http_guard_t *g) {
  if (!g->lev) return;
  const bool at_cap = g->n_conns >= g->cfg.max_conns;
  if (at_cap && !g->cap_paused)
    GT_LOG_WARN("http: %d connections open (--http-max-conns): accepting paused until one closes", g->n_conns);
  g->cap_paused = at_cap;
  if (g->backoff || at_cap) evconnlistener_disable(g->lev);
  else evconnlistener_enable(g->lev);
}

static void on_resume(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  http_guard_t *g = arg;
  g->backoff = false;
  listener_update(g);
}

/* libevent calls this when accept() fails with an error it does not retry itself (EMFILE,
 * ENFILE, ENOBUFS, ENOMEM): pause instead of spinning on a listening socket that stays
 * readable. */
static http_guard_t *g_lev_owner[8];
static struct evconnlistener *g_lev_key[8];

static void on_accept_error(struct evconnlistener *lev, void *arg) {
  (void)arg;
  const int e = EVUTIL_SOCKET_ERROR();
  http_guard_t *g = NULL;
  for (int i = 0; i < 8; i++)
    if (g_lev_key[i] == lev) g = g_lev_owner[i];
  if (!g) {
    evconnlistener_disable(lev);
    return;
  }
  g->accept_fails++;
  g->backoff_ms = g->backoff_ms ? g->backoff_ms * 2 : GUARD_BACKOFF_MIN_MS;
  if (g->backoff_ms > GUARD_BACKOFF_MAX_MS) g->backoff_ms = GUARD_BACKOFF_MAX_MS;
  const double now = gt_now_ms();
  if (!g->last_log || now - g->last_log >= GUARD_LOG_EVERY_MS) {
    GT_LOG_ERROR("http: accept failed: %s (%ld times since the last report); %d connections open; "
                 "accepting paused for %d ms (raise LimitNOFILE / ulimit -n, or lower --http-max-conns)",
                 strerror(e), g->accept_fails, g->n_conns, g->backoff_ms);
    g->accept_fails = 0;
    g->last_log = now;
  }
  if (g->m) metrics_reject(g->m, "accept_failed");
  g->backoff = true;
  evconnlistener_disable(lev);
  struct timeval tv = {g->backoff_ms / 1000, (g->backoff_ms % 1000) * 1000};
  evtimer_add(g->resume, &tv);
}

void http_guard_listen(http_guard_t *g, struct evconnlistener *lev) {
  g->lev = lev;
  for (int i = 0; i < 8; i++)
    if (!g_lev_key[i] || g_lev_key[i] == lev) {
      g_lev_key[i] = lev;
      g_lev_owner[i] = g;
      break;
    }
  evconnlistener_set_error_cb(lev, on_accept_error);
  listener_update(g);
}

/* ---- the head parser ---- */
static void set_verdict(hconn_t *c, int status, const char *code, const char *msg) {
  if (c->verdict) return;
  c->verdict = status;
  oa_err(&c->err, status, "invalid_request_error", NULL, code, "%s", msg);
  if (c->g->m) metrics_reject(c->g->m, code);
}

static void head_reset(hconn_t *c) {
  c->t_start = c->t_head = 0;
  c->head_bytes = 0;
  c->n_lines = c->n_headers = c->line_len = 0;
  c->last = 0;
  c->in_body = c->cl_seen = c->te_seen = false;
}

/* The name of a kept head line matches `name` (case-insensitive) and is followed by ':'; *v is
 * its value with blanks trimmed (within the kept bytes). */
static bool header_is(const hconn_t *c, const char *name, char *v, size_t vsz) {
  size_t nl = strlen(name), kept = c->line_len < GUARD_LINE_KEEP ? (size_t)c->line_len : GUARD_LINE_KEEP;
  if (kept <= nl || strncasecmp(c->line, name, nl) || c->line[nl] != ':') return false;
  size_t a = nl + 1, b = kept;
  if (b > a && c->line[b - 1] == '\r') b--;
  while (a < b && (c->line[a] == ' ' || c->line[a] == '\t')) a++;
  while (b > a && (c->line[b - 1] == ' ' || c->line[b - 1] == '\t')) b--;
  if (c->line_len > GUARD_LINE_KEEP) snprintf(v, vsz, "(overlong)"); /* no valid length is this long */
  else snprintf(v, vsz, "%.*s", (int)(b - a), c->line + a);
  return true;
}

static void end_line(hconn_t *c) {
  const int len = c->line_len - (c->last == '\r' ? 1 : 0);
  if (len <= 0) {
    if (c->n_lines > 0) {
      c->in_body = true; /* the empty line: the head is complete */
      c->t_head = gt_now_ms();
    }
    c->line_len = 0; /* an empty line before the request line: evhttp refuses it itself */
    return;
  }
  if (c->n_lines++ > 0 && c->line[0] != ' ' && c->line[0] != '\t') { /* a header (not a folded line) */
    char v[GUARD_LINE_KEEP];
    if (++c->n_headers > c->g->cfg.max_headers) {
      char msg[128];
      snprintf(msg, sizeof msg, "too many header fields (more than %d)", c->g->cfg.max_headers);
      set_verdict(c, 431, "header_fields_too_large", msg);
    } else if (header_is(c, "Content-Length", v, sizeof v)) {
      if (c->cl_seen && strcmp(c->cl, v)) set_verdict(c, 400, "invalid_framing", "conflicting Content-Length headers");
      c->cl_seen = true;
      snprintf(c->cl, sizeof c->cl, "%s", v);
    } else if (header_is(c, "Transfer-Encoding", v, sizeof v)) {
      c->te_seen = true;
    }
    if (c->cl_seen && c->te_seen)
      set_verdict(c, 400, "invalid_framing", "a request may not carry both Content-Length and Transfer-Encoding");
  }
  c->line_len = 0;
}

/* Bytes of the stream in arrival order. */
static void parse_bytes(hconn_t *c, const char *p, size_t n) {
  for (size_t i = 0; i < n && !c->verdict && !c->in_body; i++) {
    if (!c->t_start) c->t_start = gt_now_ms();
    if (++c->head_bytes > c->g->cfg.max_header_bytes) {
      char msg[128];
      snprintf(msg, sizeof msg, "request head larger than %ld bytes (--max-header-bytes)", c->g->cfg.max_header_bytes);
      set_verdict(c, 431, "header_fields_too_large", msg);
      break;
    }
    const char ch = p[i];
    if (ch == '\n') {
      end_line(c);
      continue;
    }
    if (c->line_len < GUARD_LINE_KEEP) c->line[c->line_len] = ch;
    c->line_len++;
    c->last = ch;
  }
}

/* Bytes [off, off + n) of buffer b. */
static void parse_range(hconn_t *c, struct evbuffer *b, size_t off, size_t n) {
  struct evbuffer_ptr pos;
  if (!n || evbuffer_ptr_set(b, &pos, off, EVBUFFER_PTR_SET) < 0) return;
  struct evbuffer_iovec v[8];
  while (n && !c->verdict && !c->in_body) {
    int k = evbuffer_peek(b, (ev_ssize_t)n, &pos, v, 8);
    if (k <= 0) return;
    size_t got = 0;
    for (int i = 0; i < k && i < 8 && got < n; i++) {
      size_t take = v[i].iov_len < n - got ? v[i].iov_len : n - got;
      parse_bytes(c, v[i].iov_base, take);
      got += take;
    }
    n -= got;
    if (!got || evbuffer_ptr_set(b, &pos, got, EVBUFFER_PTR_ADD) < 0) return;
  }
}

/* evhttp is reading a request on c (not handing one over, not writing an answer). */
static bool evhttp_reading(const hconn_t *c, bool *alive) {
  bufferevent_data_cb rcb = NULL;
  bufferevent_event_cb ecb = NULL;
  bufferevent_getcb(c->bev, &rcb, NULL, &ecb, NULL);
  *alive = ecb != NULL;
  return rcb && (bufferevent_get_enabled(c->bev) & EV_READ);
}

/* The router answered; evhttp reads again: the bytes parsed meanwhile belong to this request,
 * whose clocks start now. */
static void back_to_read(hconn_t *c) {
  c->phase = PH_READ;
  c->served_bytes = 0;
  const double now = gt_now_ms();
  if (c->t_start) c->t_start = now;
  if (c->t_head) c->t_head = now;
}

static void on_input(struct evbuffer *b, const struct evbuffer_cb_info *info, void *arg) {
  hconn_t *c = arg;
  if (!info->n_added) return;
  bool alive;
  if (c->phase == PH_SERVE) {
    if (evhttp_reading(c, &alive)) back_to_read(c);
    else c->served_bytes += (long)info->n_added;
  }
  parse_range(c, b, evbuffer_get_length(b) - info->n_added, info->n_added);
  if (c->verdict && !c->killed) {
    if (c->phase == PH_READ) bufferevent_disable(c->bev, EV_READ); /* read no more of it */
    event_active(c->g->tick, EV_TIMEOUT, 0);                        /* end it from the loop */
  }
}

static void on_rewrite(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  hconn_t *c = arg;
  http_errpage_rewrite(c->bev, c->verdict ? &c->err : NULL);
}

static void on_output(struct evbuffer *b, const struct evbuffer_cb_info *info, void *arg) {
  hconn_t *c = arg;
  if (http_errpage_candidate(b, info)) event_active(c->rw, EV_TIMEOUT, 0);
}

/* ---- connections ---- */
static void conn_free(hconn_t *c) {
  http_guard_t *g = c->g;
  if (c->prev) c->prev->next = c->next;
  else g->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  else g->tail = c->prev;
  for (hconn_t **pp = &g->by_bev[ptr_bucket(c->bev)]; *pp; pp = &(*pp)->hnext)
    if (*pp == c) {
      *pp = c->hnext;
      break;
    }
  if (c->addr && --c->addr->n == 0) {
    for (gaddr_t **pp = &g->addrs[addr_bucket(&c->addr->ss)]; *pp; pp = &(*pp)->next)
      if (*pp == c->addr) {
        *pp = c->addr->next;
        break;
      }
    free(c->addr);
  }
  if (c->rw) event_free(c->rw);
  bufferevent_decref(c->bev);
  free(c);
  g->n_conns--;
}

/* A stream is many small writes (one SSE event per token). With Nagle on, a write waits while
 * the previous one is unacknowledged, and a Linux client delays that ACK by its 40 ms timer
 * whenever it takes the last segment for a full-sized one (two segments in a row of one length
 * of 536 bytes or more): issue 24's 40 ms p99 inter-token interval. Set once per connection, as
 * soon as its socket is known (no-op before; a failure is logged and not retried; a unix socket
 * has no such option). */
static void conn_nodelay(hconn_t *c) {
  const evutil_socket_t fd = bufferevent_getfd(c->bev);
  if (c->nodelay || fd < 0) return;
  c->nodelay = true;
  const int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0 && errno != EOPNOTSUPP && errno != ENOPROTOOPT)
    GT_LOG_WARN("http: TCP_NODELAY on an accepted connection: %s", strerror(errno));
}

/* Counts c against its client address; false when that is over the cap. */
static bool adopt(hconn_t *c) {
  http_guard_t *g = c->g;
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  memset(&ss, 0, sizeof ss);
  const evutil_socket_t fd = bufferevent_getfd(c->bev);
  if (fd < 0 || getpeername(fd, (struct sockaddr *)&ss, &sl) != 0) return true; /* not yet known */
  conn_nodelay(c);
  if (ss.ss_family == AF_INET) ((struct sockaddr_in *)&ss)->sin_port = 0;
  else if (ss.ss_family == AF_INET6) ((struct sockaddr_in6 *)&ss)->sin6_port = 0;
  else ss.ss_family = AF_UNSPEC; /* a unix socket: one bucket */
  const unsigned h = addr_bucket(&ss);
  gaddr_t *a = g->addrs[h];
  while (a && !addr_eq(&a->ss, &ss)) a = a->next;
  if (!a) {
    if (!(a = calloc(1, sizeof *a))) return true;
    a->ss = ss;
    a->next = g->addrs[h];
    g->addrs[h] = a;
  }
  a->n++;
  c->addr = a;
  return a->n <= g->cfg.max_conns_per_addr;
}

/* Makes evhttp fail the request it reads on c: it answers (the page becomes c's verdict) and
 * closes. Only while evhttp reads. */
static void kill_reading(hconn_t *c) {
  bufferevent_event_cb ecb = NULL;
  void *earg = NULL;
  bufferevent_getcb(c->bev, NULL, NULL, &ecb, &earg);
  c->killed = true;
  if (ecb) ecb(c->bev, BEV_EVENT_READING, earg);
}

/* The client sent more than a whole next request while the router answered: drop it. */
static void kill_drop(hconn_t *c) {
  bufferevent_event_cb ecb = NULL;
  void *earg = NULL;
  bufferevent_getcb(c->bev, NULL, NULL, &ecb, &earg);
  c->killed = true;
  GT_LOG_WARN("http: a client sent %ld bytes while its request was answered: connection dropped", c->served_bytes);
  if (ecb) ecb(c->bev, BEV_EVENT_READING | BEV_EVENT_EOF, earg);
}

static void tick_arm(http_guard_t *g) {
  struct timeval tv = {0, GUARD_TICK_MS * 1000};
  if (g->conns && !evtimer_pending(g->tick, NULL)) evtimer_add(g->tick, &tv);
}

static void on_tick(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  http_guard_t *g = arg;
  const double now = gt_now_ms();
  const int before = g->n_conns;
  hconn_t *next;
  for (hconn_t *c = g->conns; c; c = next) {
    next = c->next;
    bool alive;
    const bool reading = evhttp_reading(c, &alive);
    if (!alive) { /* evhttp freed the connection */
      conn_free(c);
      continue;
    }
    if (c->killed) continue;
    if (!c->addr && !adopt(c)) {
      char msg[160];
      snprintf(msg, sizeof msg, "too many connections from your address (more than %d, --http-max-conns-per-addr)",
               g->cfg.max_conns_per_addr);
      c->verdict = 0; /* this one replaces any other */
      set_verdict(c, 429, "too_many_connections", msg);
    }
    if (c->phase == PH_SERVE) {
      if (reading) back_to_read(c);
      else if (c->served_bytes > g->cfg.max_header_bytes + 64 * 1024) {
        kill_drop(c);
        continue;
      }
    }
    bufferevent_data_cb rcb = NULL;
    bufferevent_getcb(c->bev, &rcb, NULL, NULL, NULL);
    if (c->phase != PH_READ || !rcb) continue; /* not reading: evhttp answers (its own page too) */
    if (!c->verdict && c->t_start && !c->in_body && now - c->t_start > g->cfg.head_timeout_ms) {
      char msg[160];
      snprintf(msg, sizeof msg, "request head not received within %d ms (--http-head-timeout-s)", g->cfg.head_timeout_ms);
      set_verdict(c, 408, "request_timeout", msg);
    } else if (!c->verdict && c->in_body && now - c->t_head > g->cfg.body_timeout_ms) {
      char msg[160];
      snprintf(msg, sizeof msg, "request body not received within %d ms (--http-body-timeout-s)", g->cfg.body_timeout_ms);
      set_verdict(c, 408, "request_timeout", msg);
    }
    if (c->verdict) {
      GT_LOG_INFO("http: connection refused: %d %s", c->verdict, c->err.message);
      kill_reading(c);
    }
  }
  if (g->n_conns < before) listener_update(g);
  tick_arm(g);
}

struct bufferevent *http_guard_bev(struct event_base *base, void *arg) {
  http_guard_t *g = arg;
  hconn_t *c = calloc(1, sizeof *c);
  /* options 0, like libevent's own: evhttp closes the socket itself */
  struct bufferevent *bev = c ? bufferevent_socket_new(base, -1, 0) : NULL;
  if (!bev) {
    free(c);
    return NULL;
  }
  c->g = g;
  c->bev = bev;
  c->rw = event_new(base, -1, 0, on_rewrite, c);
  if (!c->rw || !evbuffer_add_cb(bufferevent_get_input(bev), on_input, c) ||
      !evbuffer_add_cb(bufferevent_get_output(bev), on_output, c)) {
    if (c->rw) event_free(c->rw);
    bufferevent_free(bev);
    free(c);
    return NULL;
  }
  bufferevent_incref(bev);
  c->prev = g->tail;
  if (g->tail) g->tail->next = c;
  else g->conns = c;
  g->tail = c;
  const unsigned h = ptr_bucket(bev);
  c->hnext = g->by_bev[h];
  g->by_bev[h] = c;
  g->n_conns++;
  g->backoff_ms = 0; /* accept works again */
  if (g->n_conns >= g->cfg.max_conns) listener_update(g);
  event_active(g->tick, EV_TIMEOUT, 0); /* adopt it (its address) from the loop */
  return bev;
}

int http_guard_request(http_guard_t *g, struct bufferevent *bev, oa_error_t *e) {
  hconn_t *c = bev ? find_conn(g, bev) : NULL;
  if (!c) return 0;
  conn_nodelay(c); /* before the first byte of the answer, whether or not the tick adopted c yet */
  const int v = c->verdict;
  if (v) *e = c->err;
  c->verdict = 0;
  c->phase = PH_SERVE;
  c->served_bytes = 0;
  head_reset(c);
  /* what is left in the input is the start of the next request */
  struct evbuffer *in = bufferevent_get_input(bev);
  parse_range(c, in, 0, evbuffer_get_length(in));
  return v;
}

int http_guard_open(const http_guard_t *g) { return g ? g->n_conns : 0; }

http_guard_t *http_guard_new(struct event_base *base, const http_guard_cfg_t *cfg, metrics_t *m) {
  http_guard_t *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  g->base = base;
  g->cfg = *cfg;
  g->m = m;
  g->tick = evtimer_new(base, on_tick, g);
  g->resume = evtimer_new(base, on_resume, g);
  if (!g->tick || !g->resume) {
    http_guard_free(g);
    return NULL;
  }
  return g;
}

void http_guard_free(http_guard_t *g) {
  if (!g) return;
  while (g->conns) conn_free(g->conns);
  for (int i = 0; i < 8; i++)
    if (g_lev_owner[i] == g) g_lev_owner[i] = NULL, g_lev_key[i] = NULL;
  if (g->tick) event_free(g->tick);
  if (g->resume) event_free(g->resume);
  free(g);
}
