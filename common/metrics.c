/* common/metrics.c — see metrics.h. */
#include "common/metrics.h"

#include "common/strbuf.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct gt_metric {
  gt_metric_kind_t kind;
  char *name, *help, *labels;
  double value, sum;
  double *bounds;     /* [n_bounds] */
  uint64_t *buckets;  /* [n_bounds + 1], not cumulative; last = +Inf */
  uint64_t count;
  int n_bounds;
  gt_metrics_t *reg;
};

struct gt_metrics {
  pthread_mutex_t mu;
  gt_metric_t **v;
  int n, cap;
  gt_metrics_collect_fn collect;
  void *collect_ud;
  char *const_labels; /* `name="value"` put first on every series, or NULL */
  pthread_mutex_t probe_mu; /* guards probe and its calls (never taken with mu) */
  gt_metrics_probe_fn probe;
  void *probe_ud;
};

void gt_metrics_on_probe(gt_metrics_t *m, gt_metrics_probe_fn fn, void *ud) {
  pthread_mutex_lock(&m->probe_mu);
  m->probe = fn;
  m->probe_ud = ud;
  pthread_mutex_unlock(&m->probe_mu);
}

/* HTTP status of a probe path (0: no probe answers it), msg its state word. */
static int run_probe(gt_metrics_t *m, const char *path, char *msg, size_t n) {
  pthread_mutex_lock(&m->probe_mu);
  int st = m->probe ? m->probe(m->probe_ud, path, msg, n) : 0;
  pthread_mutex_unlock(&m->probe_mu);
  return st;
}

gt_metrics_t *gt_metrics_create(void) {
  gt_metrics_t *m = calloc(1, sizeof *m);
  if (m) {
    pthread_mutex_init(&m->mu, NULL);
    pthread_mutex_init(&m->probe_mu, NULL);
  }
  return m;
}

static void metric_free(gt_metric_t *x) {
  free(x->name);
  free(x->help);
  free(x->labels);
  free(x->bounds);
  free(x->buckets);
  free(x);
}

void gt_metrics_free(gt_metrics_t *m) {
  if (!m) return;
  for (int i = 0; i < m->n; i++) metric_free(m->v[i]);
  free(m->v);
  free(m->const_labels);
  pthread_mutex_destroy(&m->mu);
  pthread_mutex_destroy(&m->probe_mu);
  free(m);
}

gt_metric_t *gt_metrics_add(gt_metrics_t *m, gt_metric_kind_t kind, const char *name, const char *help,
                            const char *labels, const double *bounds, int n_bounds) {
  gt_metric_t *x = calloc(1, sizeof *x);
  if (!x) return NULL;
  x->kind = kind;
  x->reg = m;
  x->name = strdup(name);
  x->help = strdup(help ? help : "");
  x->labels = labels && *labels ? strdup(labels) : NULL;
  if (kind == GT_METRIC_HISTOGRAM) {
    x->n_bounds = n_bounds > 0 ? n_bounds : 0;
    x->bounds = malloc(sizeof(double) * (size_t)(x->n_bounds + 1));
    x->buckets = calloc((size_t)x->n_bounds + 1, sizeof(uint64_t));
    if (x->bounds && x->n_bounds) memcpy(x->bounds, bounds, sizeof(double) * (size_t)x->n_bounds);
  }
  if (!x->name || !x->help || (labels && *labels && !x->labels) ||
      (kind == GT_METRIC_HISTOGRAM && (!x->bounds || !x->buckets))) {
    metric_free(x);
    return NULL;
  }
  pthread_mutex_lock(&m->mu);
  if (m->n == m->cap) {
    int cap = m->cap ? m->cap * 2 : 32;
    gt_metric_t **v = realloc(m->v, sizeof *v * (size_t)cap);
    if (!v) {
      pthread_mutex_unlock(&m->mu);
      metric_free(x);
      return NULL;
    }
    m->v = v;
    m->cap = cap;
  }
  m->v[m->n++] = x;
  pthread_mutex_unlock(&m->mu);
  return x;
}

void gt_metric_inc(gt_metric_t *x, double v) {
  if (!x) return;
  pthread_mutex_lock(&x->reg->mu);
  x->value += v;
  pthread_mutex_unlock(&x->reg->mu);
}

void gt_metric_set(gt_metric_t *x, double v) {
  if (!x) return;
  pthread_mutex_lock(&x->reg->mu);
  x->value = v;
  pthread_mutex_unlock(&x->reg->mu);
}

void gt_metric_observe(gt_metric_t *x, double v) {
  if (!x || x->kind != GT_METRIC_HISTOGRAM) return;
  int i = 0;
  while (i < x->n_bounds && v > x->bounds[i]) i++;
  pthread_mutex_lock(&x->reg->mu);
  x->buckets[i]++;
  x->count++;
  x->sum += v;
  pthread_mutex_unlock(&x->reg->mu);
}

double gt_metric_value(gt_metric_t *x) {
  pthread_mutex_lock(&x->reg->mu);
  double v = x->kind == GT_METRIC_HISTOGRAM ? (double)x->count : x->value;
  pthread_mutex_unlock(&x->reg->mu);
  return v;
}

double gt_metric_sum(gt_metric_t *x) {
  pthread_mutex_lock(&x->reg->mu);
  double v = x->sum;
  pthread_mutex_unlock(&x->reg->mu);
  return v;
}

void gt_metrics_on_collect(gt_metrics_t *m, gt_metrics_collect_fn fn, void *ud) {
  pthread_mutex_lock(&m->mu);
  m->collect = fn;
  m->collect_ud = ud;
  pthread_mutex_unlock(&m->mu);
}

/* ---- text format ---- */
static const char *kind_name(gt_metric_kind_t k) {
  return k == GT_METRIC_COUNTER ? "counter" : k == GT_METRIC_GAUGE ? "gauge" : "histogram";
}

/* The shortest text that reads back as v ("0.005", not "0.0050000000000000001"). */
static void fmt_num(char *s, size_t n, double v) {
  for (int prec = 6; prec <= 17; prec++) {
    snprintf(s, n, "%.*g", prec, v);
    if (strtod(s, NULL) == v) return;
  }
}

/* One series' samples into b; labels (NULL: none) come before a histogram's le. */
static void render_one(gt_sb_t *b, const gt_metric_t *x, const char *labels) {
  char num[64];
  if (x->kind != GT_METRIC_HISTOGRAM) {
    fmt_num(num, sizeof num, x->value);
    if (labels) gt_sb_printf(b, "%s{%s} %s\n", x->name, labels, num);
    else gt_sb_printf(b, "%s %s\n", x->name, num);
    return;
  }
  uint64_t cum = 0;
  const char *sep = labels ? "," : "";
  const char *lab = labels ? labels : "";
  for (int k = 0; k <= x->n_bounds; k++) {
    cum += x->buckets[k];
    if (k < x->n_bounds) fmt_num(num, sizeof num, x->bounds[k]);
    else snprintf(num, sizeof num, "+Inf");
    gt_sb_printf(b, "%s_bucket{%s%sle=\"%s\"} %llu\n", x->name, lab, sep, num, (unsigned long long)cum);
  }
  fmt_num(num, sizeof num, x->sum);
  if (labels) gt_sb_printf(b, "%s_sum{%s} %s\n%s_count{%s} %llu\n", x->name, lab, num, x->name, lab, (unsigned long long)x->count);
  else gt_sb_printf(b, "%s_sum %s\n%s_count %llu\n", x->name, num, x->name, (unsigned long long)x->count);
}

int gt_metrics_set_label(gt_metrics_t *m, const char *name, const char *value) {
  gt_sb_t b = {0};
  gt_sb_printf(&b, "%s=\"", name);
  for (const char *p = value; *p; p++) { /* the text format's escapes */
    if (*p == '\\' || *p == '"') gt_sb_printf(&b, "\\%c", *p);
    else if (*p == '\n') gt_sb_add(&b, "\\n", 2);
    else gt_sb_add(&b, p, 1);
  }
  gt_sb_add(&b, "\"", 1);
  if (b.oom) {
    free(b.p);
    return GT_ENOMEM;
  }
  pthread_mutex_lock(&m->mu);
  free(m->const_labels);
  m->const_labels = b.p;
  pthread_mutex_unlock(&m->mu);
  return GT_OK;
}

int gt_metrics_render(gt_metrics_t *m, char **out, size_t *len, gt_err_t *err) {
  pthread_mutex_lock(&m->mu);
  gt_metrics_collect_fn fn = m->collect;
  void *ud = m->collect_ud;
  pthread_mutex_unlock(&m->mu);
  if (fn) fn(ud);
  gt_sb_t b = {0};
  gt_sb_add(&b, "", 0); /* "" when there is nothing to render */
  pthread_mutex_lock(&m->mu);
  for (int i = 0; i < m->n; i++) {
    gt_metric_t *x = m->v[i];
    if (i == 0 || strcmp(m->v[i - 1]->name, x->name))
      gt_sb_printf(&b, "# HELP %s %s\n# TYPE %s %s\n", x->name, x->help, x->name, kind_name(x->kind));
    if (!m->const_labels) {
      render_one(&b, x, x->labels);
      continue;
    }
    gt_sb_t lab = {0}; /* the constant labels, then the series' own */
    gt_sb_printf(&lab, "%s%s%s", m->const_labels, x->labels ? "," : "", x->labels ? x->labels : "");
    if (lab.oom) b.oom = 1;
    else render_one(&b, x, lab.p);
    free(lab.p);
  }
  pthread_mutex_unlock(&m->mu);
  if (b.oom) {
    free(b.p);
    return gt_err_set(err, GT_ENOMEM, "out of memory");
  }
  *out = b.p;
  if (len) *len = b.len;
  return GT_OK;
}

/* ---- HTTP listener ---- */
struct gt_metrics_http {
  gt_metrics_t *m;
  int fd;
  int wake[2]; /* pipe: stop */
  pthread_t th;
};

static void write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return;
    p += k;
    n -= (size_t)k;
  }
}

static void serve_one(gt_metrics_http_t *h, int c) {
  char req[2048];
  size_t n = 0;
  /* read the request head (bounded; 2 s per read) */
  struct pollfd p = {.fd = c, .events = POLLIN};
  while (n < sizeof req - 1 && poll(&p, 1, 2000) > 0) {
    ssize_t k = recv(c, req + n, sizeof req - 1 - n, 0);
    if (k <= 0) break;
    n += (size_t)k;
    req[n] = 0;
    if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n")) break;
  }
  req[n] = 0;
  char hdr[256];
  if (!strncmp(req, "GET /metrics", 12) && (req[12] == ' ' || req[12] == '?')) {
    char *body = NULL;
    size_t len = 0;
    if (gt_metrics_render(h->m, &body, &len, NULL) == GT_OK) {
      int k = snprintf(hdr, sizeof hdr,
                       "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                       "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                       len);
      write_all(c, hdr, (size_t)k);
      write_all(c, body, len);
      free(body);
      return;
    }
    const char *e = "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    write_all(c, e, strlen(e));
    return;
  }
  for (int i = 0; i < 2; i++) {
    static const char *paths[] = {"/health", "/ready"};
    size_t pl = strlen(paths[i]);
    if (strncmp(req, "GET ", 4) || strncmp(req + 4, paths[i], pl) || (req[4 + pl] != ' ' && req[4 + pl] != '?')) continue;
    char msg[64] = "";
    int st = run_probe(h->m, paths[i], msg, sizeof msg);
    if (!st) break;
    char body[128];
    int bl = snprintf(body, sizeof body, "{\"status\":\"%s\"}\n", msg);
    int k = snprintf(hdr, sizeof hdr,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                     "Connection: close\r\n\r\n",
                     st, st == 200 ? "OK" : "Service Unavailable", bl);
    write_all(c, hdr, (size_t)k);
    write_all(c, body, (size_t)bl);
    return;
  }
  const char *nf = "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 10\r\n"
                   "Connection: close\r\n\r\nnot found\n";
  write_all(c, nf, strlen(nf));
}

static void *http_main(void *arg) {
  gt_metrics_http_t *h = arg;
  for (;;) {
    struct pollfd p[2] = {{.fd = h->fd, .events = POLLIN}, {.fd = h->wake[0], .events = POLLIN}};
    int k = poll(p, 2, -1);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 || p[1].revents) break;
    if (p[0].revents & POLLIN) {
      int c = accept(h->fd, NULL, NULL);
      if (c < 0) continue;
      serve_one(h, c);
      close(c);
    }
  }
  return NULL;
}

int gt_metrics_http_start(gt_metrics_t *m, const char *host, int port, int *bound_port, gt_metrics_http_t **out,
                          gt_err_t *err) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  int g = getaddrinfo(host && *host ? host : NULL, ps, &hints, &ai);
  if (g) return gt_err_set(err, GT_EINVAL, "metrics listener: cannot resolve '%s': %s", host ? host : "", gai_strerror(g));
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 64)) {
    int e = errno;
    if (fd >= 0) close(fd);
    freeaddrinfo(ai);
    return gt_err_set(err, GT_EIO, "metrics listener on %s:%d: %s", host ? host : "*", port, strerror(e));
  }
  freeaddrinfo(ai);
  struct sockaddr_storage sa;
  socklen_t sl = sizeof sa;
  getsockname(fd, (struct sockaddr *)&sa, &sl);
  int bp = sa.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&sa)->sin6_port)
                                    : ntohs(((struct sockaddr_in *)&sa)->sin_port);
  gt_metrics_http_t *h = calloc(1, sizeof *h);
  if (!h || pipe(h->wake)) {
    free(h);
    close(fd);
    return gt_err_set(err, GT_ENOMEM, "metrics listener: out of resources");
  }
  h->m = m;
  h->fd = fd;
  if (pthread_create(&h->th, NULL, http_main, h)) {
    close(h->wake[0]);
    close(h->wake[1]);
    close(fd);
    free(h);
    return gt_err_set(err, GT_EINTERNAL, "metrics listener: cannot start its thread");
  }
  if (bound_port) *bound_port = bp;
  *out = h;
  return GT_OK;
}

void gt_metrics_http_stop(gt_metrics_http_t *h) {
  if (!h) return;
  ssize_t w = write(h->wake[1], "x", 1);
  (void)w;
  pthread_join(h->th, NULL);
  close(h->wake[0]);
  close(h->wake[1]);
  close(h->fd);
  free(h);
}
