/* tests/sse_server/sse_server.c — one poll loop thread; each connection plays its response's
 * events on an absolute schedule (request-read time + cumulative delays). */
#define _GNU_SOURCE
#include "tests/sse_server/sse_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"

#define MAX_CONNS 256

typedef struct conn {
  int fd;
  char *in;
  size_t in_len, in_cap;
  int playing;     /* request read, events being played */
  json_t *events;  /* borrowed from the script */
  size_t next_ev;
  int64_t due_ns;  /* when next_ev goes out */
  int log_i;       /* index of this connection's request in the log */
} conn_t;

typedef struct played {
  int64_t t_read_ns;   /* request fully read */
  int64_t *sent_ns;    /* send time of each event played */
  int n_sent, cap_sent;
} played_t;

typedef struct route_ctr {
  char *key;
  int n;
} route_ctr_t;

struct sse_srv {
  json_t *script;
  int lfd, wake[2], port;
  pthread_t th;
  conn_t conns[MAX_CONNS];
  pthread_mutex_t mu;
  char **log; /* "METHOD PATH\nbody" per request */
  played_t *played; /* timeline per request (same index as log) */
  int n_log, cap_log;
  route_ctr_t ctr[64];
  int n_ctr;
};

static void send_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= (size_t)w;
  }
}

static void conn_close(conn_t *c) {
  if (c->fd >= 0) close(c->fd);
  free(c->in);
  memset(c, 0, sizeof *c);
  c->fd = -1;
}

static const char *reason(int st) {
  switch (st) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 503: return "Service Unavailable";
    default: return st < 400 ? "OK" : "Error";
  }
}

static void send_body(int fd, int status, const char *type, const char *body) {
  char hdr[256];
  int n = snprintf(hdr, sizeof hdr,
                   "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                   "Connection: close\r\n\r\n",
                   status, reason(status), type, strlen(body));
  send_all(fd, hdr, (size_t)n);
  send_all(fd, body, strlen(body));
}

static void send_json(int fd, int status, const char *body) { send_body(fd, status, "application/json", body); }

/* Picks the response for "METHOD /path" (sequence entries advance per route). */
static json_t *pick(sse_srv_t *s, const char *key) {
  json_t *routes = json_object_get(s->script, "routes");
  if (!routes) return s->script;
  json_t *r = json_object_get(routes, key);
  if (!r) return NULL;
  if (!json_is_array(r)) return r;
  route_ctr_t *c = NULL;
  for (int i = 0; i < s->n_ctr; i++)
    if (strcmp(s->ctr[i].key, key) == 0) c = &s->ctr[i];
  if (!c && s->n_ctr < 64) {
    c = &s->ctr[s->n_ctr++];
    c->key = strdup(key);
    c->n = 0;
  }
  size_t n = json_array_size(r);
  size_t i = c ? (size_t)c->n++ : 0;
  return json_array_get(r, i < n ? i : n - 1);
}

static void do_tokenize(int fd, const char *body, size_t len) {
  json_t *req = json_loadb(body, len, 0, NULL);
  const char *p = json_string_value(json_object_get(req, "prompt"));
  json_t *toks = json_array();
  int count = 0;
  for (const char *q = p ? p : ""; *q;) {
    while (*q == ' ' || *q == '\n' || *q == '\t') q++;
    if (!*q) break;
    while (*q && *q != ' ' && *q != '\n' && *q != '\t') q++;
    json_array_append_new(toks, json_integer(count++));
  }
  json_t *o = json_pack("{s:o, s:i, s:i}", "tokens", toks, "count", count, "max_model_len", 4096);
  char *t = json_dumps(o, JSON_COMPACT);
  send_json(fd, 200, t);
  free(t);
  json_decref(o);
  json_decref(req);
}

/* The request in c->in is complete (headers end at hdr_end, body of blen bytes follows). */
static void on_request(sse_srv_t *s, conn_t *c, size_t hdr_end, size_t blen) {
  char method[16] = "", path[256] = "", route[256];
  sscanf(c->in, "%15s %255s", method, path);
  snprintf(route, sizeof route, "%s", path);
  char *q = strchr(route, '?'); /* routes ignore the query; the log keeps it */
  if (q) *q = 0;
  const char *body = c->in + hdr_end;
  pthread_mutex_lock(&s->mu);
  if (s->n_log == s->cap_log) {
    int cap = s->cap_log ? s->cap_log * 2 : 64;
    char **nl = realloc(s->log, (size_t)cap * sizeof *nl);
    if (nl) s->log = nl;
    played_t *np = realloc(s->played, (size_t)cap * sizeof *np);
    if (np) s->played = np;
    if (nl && np) s->cap_log = cap;
  }
  c->log_i = -1;
  if (s->n_log < s->cap_log) {
    size_t n = strlen(method) + strlen(path) + blen + 3;
    char *e = malloc(n);
    if (e) {
      snprintf(e, n, "%s %s\n%.*s", method, path, (int)blen, body);
      s->played[s->n_log] = (played_t){gt_now_ns(), NULL, 0, 0};
      c->log_i = s->n_log;
      s->log[s->n_log++] = e;
    }
  }
  pthread_mutex_unlock(&s->mu);

  char key[300];
  snprintf(key, sizeof key, "%s %s", method, route);
  json_t *r = pick(s, key);
  json_t *sw = json_object_get(r, "switch");
  if (json_is_array(sw)) { /* first case whose "contains" is in the body (no "contains": default) */
    json_t *cs, *chosen = NULL;
    size_t k;
    json_array_foreach(sw, k, cs) {
      const char *needle = json_string_value(json_object_get(cs, "contains"));
      json_t *ml = json_object_get(cs, "min_len");
      int ok = !needle || memmem(body, blen, needle, strlen(needle));
      if (json_is_integer(ml) && blen < (size_t)json_integer_value(ml)) ok = 0;
      if (ok) {
        chosen = json_object_get(cs, "response");
        break;
      }
    }
    r = chosen;
  }
  if (!r) {
    send_json(c->fd, 404, "{\"error\":{\"message\":\"no such route in script\",\"type\":\"not_found\",\"param\":null,\"code\":404}}");
    conn_close(c);
    return;
  }
  if (json_object_get(r, "tokenize")) {
    do_tokenize(c->fd, body, blen);
    conn_close(c);
    return;
  }
  json_t *st = json_object_get(r, "status");
  int status = json_is_integer(st) ? (int)json_integer_value(st) : 200;
  json_t *tx = json_object_get(r, "text");
  if (json_is_string(tx)) {
    send_body(c->fd, status, "text/plain; version=0.0.4", json_string_value(tx));
    conn_close(c);
    return;
  }
  json_t *js = json_object_get(r, "json");
  if (js) {
    char *t = json_dumps(js, JSON_COMPACT | JSON_ENCODE_ANY);
    send_json(c->fd, status, t ? t : "null");
    free(t);
    conn_close(c);
    return;
  }
  char hdr[256];
  int n = snprintf(hdr, sizeof hdr,
                   "HTTP/1.1 %d %s\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                   "Connection: close\r\n\r\n",
                   status, reason(status));
  send_all(c->fd, hdr, (size_t)n);
  c->events = json_object_get(r, "events");
  c->next_ev = 0;
  c->playing = 1;
  c->due_ns = gt_now_ns();
  json_t *e0 = json_array_get(c->events, 0);
  c->due_ns += (int64_t)(json_number_value(json_object_get(e0, "delay_ms")) * 1e6);
  if (!e0) conn_close(c);
}

static void note_sent(sse_srv_t *s, conn_t *c) {
  if (c->log_i < 0) return;
  pthread_mutex_lock(&s->mu);
  played_t *p = &s->played[c->log_i];
  if (p->n_sent == p->cap_sent) {
    int cap = p->cap_sent ? p->cap_sent * 2 : 32;
    int64_t *ns = realloc(p->sent_ns, (size_t)cap * sizeof *ns);
    if (ns) p->sent_ns = ns, p->cap_sent = cap;
  }
  if (p->n_sent < p->cap_sent) p->sent_ns[p->n_sent++] = gt_now_ns();
  pthread_mutex_unlock(&s->mu);
}

/* Sends every event of c that is due; closes the connection after the last one. */
static void play(sse_srv_t *s, conn_t *c, int64_t now) {
  while (c->playing && now >= c->due_ns) {
    json_t *e = json_array_get(c->events, c->next_ev);
    json_t *d = json_object_get(e, "data"), *raw = json_object_get(e, "raw");
    if (json_is_true(json_object_get(e, "close"))) {
      conn_close(c);
      return;
    }
    if (d) {
      char *t = json_is_string(d) ? strdup(json_string_value(d)) : json_dumps(d, JSON_COMPACT);
      size_t n = strlen(t) + 9;
      char *msg = malloc(n);
      int len = snprintf(msg, n, "data: %s\n\n", t);
      send_all(c->fd, msg, (size_t)len);
      free(msg);
      free(t);
    } else if (json_is_string(raw)) {
      send_all(c->fd, json_string_value(raw), json_string_length(raw));
    }
    note_sent(s, c);
    c->next_ev++;
    json_t *nx = json_array_get(c->events, c->next_ev);
    if (!nx) {
      conn_close(c);
      return;
    }
    c->due_ns += (int64_t)(json_number_value(json_object_get(nx, "delay_ms")) * 1e6);
  }
}

/* Reads what is available; returns -1 when the peer closed. */
static int on_readable(sse_srv_t *s, conn_t *c) {
  char buf[65536];
  ssize_t n = recv(c->fd, buf, sizeof buf, 0);
  if (n <= 0) return -1;
  if (c->playing) return 0; /* ignore anything after the request */
  if (c->in_len + (size_t)n + 1 > c->in_cap) {
    size_t cap = c->in_cap ? c->in_cap : 4096;
    while (cap < c->in_len + (size_t)n + 1) cap *= 2;
    char *ni = realloc(c->in, cap);
    if (!ni) return -1;
    c->in = ni;
    c->in_cap = cap;
  }
  memcpy(c->in + c->in_len, buf, (size_t)n);
  c->in_len += (size_t)n;
  c->in[c->in_len] = 0;
  char *he = strstr(c->in, "\r\n\r\n");
  if (!he) return 0;
  size_t hdr_end = (size_t)(he - c->in) + 4;
  size_t blen = 0;
  for (char *l = c->in; l && l < he; l = strstr(l, "\r\n") ? strstr(l, "\r\n") + 2 : NULL)
    if (strncasecmp(l, "Content-Length:", 15) == 0) blen = strtoul(l + 15, NULL, 10);
  if (c->in_len < hdr_end + blen) return 0;
  on_request(s, c, hdr_end, blen);
  return 0;
}

static void *loop(void *arg) {
  sse_srv_t *s = arg;
  for (;;) {
    struct pollfd pf[MAX_CONNS + 2];
    int idx[MAX_CONNS + 2];
    int np = 0;
    pf[np] = (struct pollfd){s->wake[0], POLLIN, 0}, idx[np++] = -1;
    pf[np] = (struct pollfd){s->lfd, POLLIN, 0}, idx[np++] = -2;
    int64_t now = gt_now_ns(), next = now + 1000000000LL;
    for (int i = 0; i < MAX_CONNS; i++) {
      conn_t *c = &s->conns[i];
      if (c->fd < 0) continue;
      pf[np] = (struct pollfd){c->fd, POLLIN, 0}, idx[np++] = i;
      if (c->playing && c->due_ns < next) next = c->due_ns;
    }
    int64_t wait = next - now;
    if (wait < 0) wait = 0;
    struct timespec ts = {wait / 1000000000LL, wait % 1000000000LL};
    int rc = ppoll(pf, (nfds_t)np, &ts, NULL);
    if (rc < 0 && errno != EINTR) break;
    if (pf[0].revents) break;
    if (rc > 0 && (pf[1].revents & POLLIN)) {
      int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
      if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        int placed = 0;
        for (int i = 0; i < MAX_CONNS && !placed; i++)
          if (s->conns[i].fd < 0) {
            s->conns[i].fd = fd;
            placed = 1;
          }
        if (!placed) close(fd);
      }
    }
    for (int k = 2; rc > 0 && k < np; k++) {
      conn_t *c = &s->conns[idx[k]];
      if (c->fd < 0 || !(pf[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (on_readable(s, c) < 0) conn_close(c);
    }
    now = gt_now_ns();
    for (int i = 0; i < MAX_CONNS; i++)
      if (s->conns[i].fd >= 0 && s->conns[i].playing) play(s, &s->conns[i], now);
  }
  return NULL;
}

sse_srv_t *sse_srv_start(const char *script_json, gt_err_t *err) {
  json_error_t je;
  json_t *script = json_loads(script_json, 0, &je);
  if (!json_is_object(script)) {
    gt_err_set(err, GT_EFORMAT, "sse_srv: script: line %d: %s", je.line, je.text);
    json_decref(script);
    return NULL;
  }
  sse_srv_t *s = calloc(1, sizeof *s);
  if (!s) {
    json_decref(script);
    gt_err_set(err, GT_ENOMEM, "sse_srv: out of memory");
    return NULL;
  }
  s->script = script;
  s->wake[0] = s->wake[1] = -1;
  for (int i = 0; i < MAX_CONNS; i++) s->conns[i].fd = -1;
  pthread_mutex_init(&s->mu, NULL);
  s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  if (s->lfd < 0 || bind(s->lfd, (struct sockaddr *)&a, sizeof a) < 0 || listen(s->lfd, 128) < 0 ||
      getsockname(s->lfd, (struct sockaddr *)&a, &al) < 0 || pipe2(s->wake, O_CLOEXEC) < 0) {
    gt_err_set(err, GT_EIO, "sse_srv: cannot listen on loopback: %s", strerror(errno));
    if (s->lfd >= 0) close(s->lfd);
    s->lfd = -1;
    sse_srv_stop(s);
    return NULL;
  }
  s->port = ntohs(a.sin_port);
  if (pthread_create(&s->th, NULL, loop, s) != 0) {
    gt_err_set(err, GT_EINTERNAL, "sse_srv: pthread_create failed");
    close(s->lfd);
    s->lfd = -1;
    sse_srv_stop(s);
    return NULL;
  }
  return s;
}

int sse_srv_port(const sse_srv_t *s) { return s->port; }

int sse_srv_n_requests(sse_srv_t *s) {
  pthread_mutex_lock(&s->mu);
  int n = s->n_log;
  pthread_mutex_unlock(&s->mu);
  return n;
}

char *sse_srv_request(sse_srv_t *s, int i) {
  pthread_mutex_lock(&s->mu);
  char *r = i >= 0 && i < s->n_log ? strdup(s->log[i]) : NULL;
  pthread_mutex_unlock(&s->mu);
  return r;
}

int sse_srv_played(sse_srv_t *s, int i, int64_t *t_read_ns, int64_t *sent_ns, int max) {
  pthread_mutex_lock(&s->mu);
  int n = -1;
  if (i >= 0 && i < s->n_log) {
    played_t *p = &s->played[i];
    *t_read_ns = p->t_read_ns;
    n = p->n_sent;
    for (int k = 0; k < n && k < max; k++) sent_ns[k] = p->sent_ns[k];
  }
  pthread_mutex_unlock(&s->mu);
  return n;
}

void sse_srv_stop(sse_srv_t *s) {
  if (!s) return;
  if (s->lfd >= 0) { /* thread running */
    char b = 1;
    if (write(s->wake[1], &b, 1) == 1) pthread_join(s->th, NULL);
    close(s->lfd);
  }
  for (int i = 0; i < MAX_CONNS; i++)
    if (s->conns[i].fd >= 0) conn_close(&s->conns[i]);
  if (s->wake[0] >= 0) close(s->wake[0]);
  if (s->wake[1] >= 0) close(s->wake[1]);
  for (int i = 0; i < s->n_log; i++) {
    free(s->log[i]);
    free(s->played[i].sent_ns);
  }
  free(s->played);
  free(s->log);
  for (int i = 0; i < s->n_ctr; i++) free(s->ctr[i].key);
  json_decref(s->script);
  pthread_mutex_destroy(&s->mu);
  free(s);
}
