/* router/http_errpage.c — OpenAI JSON in place of libevent's own HTML error pages.
 *
 * libevent 2.1 answers some requests itself, before any router callback runs: a body over
 * --max-body-bytes (413, by Content-Length before the body is read, or while reading chunks), a
 * malformed request line or header (400), a method it does not allow (501). It writes a fixed
 * HTML page, and 2.1 has no hook to replace it (evhttp_set_errorcb and evhttp_set_newreqcb are
 * 2.2). So the router makes each connection's bufferevent itself (evhttp_set_bevcb) and watches
 * its output buffer: a 4xx/5xx status line written into an empty buffer makes an event active at
 * once; it runs in the same loop iteration, after libevent finished writing the page and before
 * the socket's write event can fire. If the buffer then holds exactly one complete text/html
 * response (the router itself never sends text/html), it is replaced by the same status with a
 * JSON body. Anything else is left as it is. */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
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

/* Runs once per candidate response; holds a reference on bev (taken by ep_on_output). */
static void ep_rewrite(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  struct bufferevent *bev = arg;
  struct evbuffer *out = bufferevent_get_output(bev);
  size_t len = evbuffer_get_length(out);
  struct evbuffer_ptr end = evbuffer_search(out, "\r\n\r\n", 4, NULL);
  char head[EP_HEAD_MAX + 1];
  if (end.pos < 0 || (size_t)end.pos + 4 > EP_HEAD_MAX) goto done;
  size_t hlen = (size_t)end.pos + 4;
  evbuffer_copyout(out, head, hlen);
  head[hlen] = '\0';
  size_t vl = 0;
  const char *ct = ep_header(head, "Content-Type", &vl);
  if (!ct || vl < 9 || strncasecmp(ct, "text/html", 9)) goto done;
  const char *cl = ep_header(head, "Content-Length", &vl);
  if (!cl || hlen + strtoul(cl, NULL, 10) != len) goto done; /* not exactly one whole page */
  int status = atoi(head + 9);
  oa_error_t e;
  ep_error_of(status, &e);
  char *js = oa_error_json(&e);
  if (!js) goto done;
  const char *eol = strstr(head, "\r\n");
  size_t jl = strlen(js);
  /* add the new response behind the page, then drop the page: the buffer is never empty in
   * between, so this does not look like a new response to ep_on_output */
  evbuffer_add(out, head, (size_t)(eol - head) + 2);
  evbuffer_add_printf(out, "Content-Type: application/json\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n", jl);
  evbuffer_add(out, js, jl);
  evbuffer_drain(out, len);
  free(js);
done:
  bufferevent_decref(bev);
}

static void ep_on_output(struct evbuffer *b, const struct evbuffer_cb_info *info, void *arg) {
  if (info->orig_size != 0 || info->n_added < 12) return;
  char p[12];
  if (evbuffer_copyout(b, p, sizeof p) != (ev_ssize_t)sizeof p) return;
  if (memcmp(p, "HTTP/1.", 7) || (p[9] != '4' && p[9] != '5')) return;
  struct bufferevent *bev = arg;
  static const struct timeval now = {0, 0};
  bufferevent_incref(bev); /* the connection may be freed before the event runs */
  if (event_base_once(bufferevent_get_base(bev), -1, EV_TIMEOUT, ep_rewrite, bev, &now) != 0)
    bufferevent_decref(bev);
}

struct bufferevent *http_errpage_bev(struct event_base *base, void *arg) {
  (void)arg;
  /* options 0, like libevent's own: evhttp closes the socket itself */
  struct bufferevent *bev = bufferevent_socket_new(base, -1, 0);
  if (!bev) return NULL; /* libevent makes its own (pages stay HTML) */
  if (!evbuffer_add_cb(bufferevent_get_output(bev), ep_on_output, bev)) {
    bufferevent_free(bev);
    return NULL;
  }
  return bev;
}
