/* router/http_errpage.c — OpenAI JSON in place of libevent's own HTML error pages.
 *
 * libevent 2.1 answers some requests itself, before any router callback runs: a body over
 * --max-body-bytes (413, by Content-Length before the body is read, or while reading chunks), a
 * malformed request line or header (400), a method it does not allow (501). It writes a fixed
 * HTML page, and 2.1 has no hook to replace it (evhttp_set_errorcb and evhttp_set_newreqcb are
 * 2.2). So the router makes each connection's bufferevent itself (evhttp_set_bevcb) and watches
 * its output buffer (http_guard.c): a 4xx/5xx status line written into an empty buffer makes an
 * event active at once; it runs in the same loop iteration, after libevent finished writing the
 * page and before the socket's write event can fire. If the buffer then holds exactly one
 * complete text/html response (the router itself never sends text/html), it is replaced by the
 * same status with a JSON body, or by the guard's own verdict for the connection (431, 408,
 * ...: the guard makes libevent fail the request, which writes a 400 page). Anything else is
 * left as it is. */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "router/http_errpage.h"
#include "router/openai.h"

#define EP_HEAD_MAX 4096 /* libevent's pages have a few short headers */

/* The header's value in a header block ("Name: value\r\n"), case-insensitive, or NULL. */
static const char *ep_header(const char *head, const char *name, size_t *len) {
  size_t nl = strlen(name);
  for (const char *p = strstr(head, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n")) {
    const char *l = p + 2;
    if (!strncasecmp(l, name, nl) && l[nl] == ':') {
      const char *v = l + nl + 1;
      while (*v == ' ') v++;
      const char *e = strstr(v, "\r\n");
      *len = e ? (size_t)(e - v) : strlen(v);
      return v;
    }
  }
  return NULL;
}

static const char *ep_reason(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return status >= 500 ? "Server Error" : "Client Error";
  }
}

static void ep_error_of(int status, oa_error_t *e) {
  switch (status) {
    case 413:
      oa_err(e, 413, "invalid_request_error", NULL, "request_too_large",
             "request body is larger than this server accepts (--max-body-bytes)");
      break;
    case 501:
    case 405:
      oa_err(e, status, "invalid_request_error", NULL, "method_not_allowed", "method not allowed");
      break;
    case 400:
      oa_err(e, 400, "invalid_request_error", NULL, "bad_request", "malformed HTTP request");
      break;
    default:
      oa_err(e, status, status >= 500 ? "server_error" : "invalid_request_error", NULL, NULL,
             "HTTP error %d", status);
  }
}

/* A socket bufferevent keeps the front of its output frozen after its first write (it thaws it
 * only around its own writes), which makes evbuffer_copyout and evbuffer_drain fail: thaw it
 * around these reads and the rewrite, and freeze it again (the socket's writer thaws it first). */
static int ep_rewrite_thawed(struct evbuffer *out, const oa_error_t *verdict);

int http_errpage_rewrite(struct bufferevent *bev, const oa_error_t *verdict) {
  struct evbuffer *out = bufferevent_get_output(bev);
  evbuffer_unfreeze(out, 1);
  const int r = ep_rewrite_thawed(out, verdict);
  evbuffer_freeze(out, 1);
  return r;
}

static int ep_rewrite_thawed(struct evbuffer *out, const oa_error_t *verdict) {
  size_t len = evbuffer_get_length(out);
  struct evbuffer_ptr end = evbuffer_search(out, "\r\n\r\n", 4, NULL);
  char head[EP_HEAD_MAX + 1];
  if (end.pos < 0 || (size_t)end.pos + 4 > EP_HEAD_MAX) return 0;
  size_t hlen = (size_t)end.pos + 4;
  evbuffer_copyout(out, head, hlen);
  head[hlen] = '\0';
  size_t vl = 0;
  const char *ct = ep_header(head, "Content-Type", &vl);
  if (!ct || vl < 9 || strncasecmp(ct, "text/html", 9)) return 0;
  const char *cl = ep_header(head, "Content-Length", &vl);
  if (!cl || hlen + strtoul(cl, NULL, 10) != len) return 0; /* not exactly one whole page */
  oa_error_t e;
  if (verdict) e = *verdict;
  else ep_error_of(atoi(head + 9), &e);
  char *js = oa_error_json(&e);
  if (!js) return 0;
  size_t jl = strlen(js);
  /* add the new response behind the page, then drop the page: the buffer is never empty in
   * between, so this does not look like a new response to the output watcher */
  evbuffer_add_printf(out, "HTTP/1.1 %d %s\r\n", e.status, ep_reason(e.status));
  evbuffer_add_printf(out, "Content-Type: application/json\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n", jl);
  evbuffer_add(out, js, jl);
  evbuffer_drain(out, len);
  free(js);
  return 1;
}

bool http_errpage_candidate(struct evbuffer *b, const struct evbuffer_cb_info *info) {
  if (info->orig_size != 0 || info->n_added < 12) return false;
  char p[12];
  evbuffer_unfreeze(b, 1); /* see http_errpage_rewrite */
  const ev_ssize_t got = evbuffer_copyout(b, p, sizeof p);
  evbuffer_freeze(b, 1);
  if (got != (ev_ssize_t)sizeof p) return false;
  return !memcmp(p, "HTTP/1.", 7) && (p[9] == '4' || p[9] == '5');
}
