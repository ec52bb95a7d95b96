/* clients/http.c — blocking JSON requests with libcurl's easy interface. */
#include "clients/http.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *gc_http_url(const gc_http_t *h, const char *path) {
  const char *b = h->base_url ? h->base_url : "";
  size_t bl = strlen(b);
  while (bl && b[bl - 1] == '/') bl--;
  size_t n = bl + strlen(path) + 2;
  char *u = malloc(n);
  if (!u) return NULL;
  snprintf(u, n, "%.*s%s%s", (int)bl, b, path[0] == '/' ? "" : "/", path);
  return u;
}

void *gc_http_headers(const gc_http_t *h, int json_body, int sse) {
  struct curl_slist *l = NULL, *t;
  if (json_body && !(l = curl_slist_append(l, "Content-Type: application/json"))) return NULL;
  if ((t = curl_slist_append(l, sse ? "Accept: text/event-stream" : "Accept: application/json")) == NULL) {
    curl_slist_free_all(l);
    return NULL;
  }
  l = t;
  if (json_body) { /* no "Expect: 100-continue" round trip before large bodies */
    if (!(t = curl_slist_append(l, "Expect:"))) {
      curl_slist_free_all(l);
      return NULL;
    }
    l = t;
  }
  if (h->api_key && h->api_key[0]) {
    char auth[1024];
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", h->api_key);
    if (!(t = curl_slist_append(l, auth))) {
      curl_slist_free_all(l);
      return NULL;
    }
    l = t;
  }
  return l;
}

typedef struct {
  char *b;
  size_t n;
  int oom;
} buf_t;

static size_t on_write(char *p, size_t sz, size_t nm, void *ud) {
  buf_t *b = ud;
  size_t n = sz * nm;
  char *nb = realloc(b->b, b->n + n + 1);
  if (!nb) {
    b->oom = 1;
    return 0;
  }
  memcpy(nb + b->n, p, n);
  b->n += n;
  nb[b->n] = 0;
  b->b = nb;
  return n;
}

int gc_http_do(const gc_http_t *h, const char *method, const char *path, const char *body,
               long *status, char **resp, gt_err_t *err) {
  *resp = NULL;
  *status = 0;
  char *url = gc_http_url(h, path);
  CURL *c = curl_easy_init();
  struct curl_slist *hd = gc_http_headers(h, body != NULL, 0);
  if (!url || !c || !hd) {
    free(url);
    if (c) curl_easy_cleanup(c);
    curl_slist_free_all(hd);
    return gt_err_set(err, GT_ENOMEM, "out of memory setting up %s %s", method, path);
  }
  buf_t b = {0};
  char ebuf[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, hd);
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
  if (body) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
  } else if (strcmp(method, "GET") == 0) {
    curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
  }
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, ebuf);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  if (h->timeout_ms > 0) curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, h->timeout_ms);
  CURLcode rc = curl_easy_perform(c);
  int ret = GT_OK;
  if (rc != CURLE_OK) {
    ret = gt_err_set(err, b.oom ? GT_ENOMEM : GT_EIO, "%s %s: %s", method, url,
                     ebuf[0] ? ebuf : curl_easy_strerror(rc));
    free(b.b);
  } else {
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    *resp = b.b ? b.b : strdup("");
  }
  curl_slist_free_all(hd);
  curl_easy_cleanup(c);
  free(url);
  return ret;
}
