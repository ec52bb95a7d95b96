/* common/grpc_creds.c — see grpc_creds.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grpc_creds.h"

#define CREDS_FILE_MAX (1L << 20) /* a PEM bundle or a token: far below this */

/* The file's text (malloc'd, NUL-terminated) or NULL with err set. */
static char *read_text(const char *what, const char *path, gt_err_t *err) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    gt_err_set(err, GT_EIO, "%s %s: %s", what, path, strerror(errno));
    return NULL;
  }
  char *buf = malloc(CREDS_FILE_MAX + 1);
  size_t n = buf ? fread(buf, 1, CREDS_FILE_MAX + 1, f) : 0;
  const int bad = ferror(f);
  fclose(f);
  if (!buf || bad || n > CREDS_FILE_MAX) {
    free(buf);
    gt_err_set(err, GT_EIO, "%s %s: %s", what, path, !buf ? "out of memory" : bad ? "read error" : "larger than 1 MiB");
    return NULL;
  }
  buf[n] = '\0';
  return buf;
}

static char *trimmed(char *s) {
  size_t a = 0, b = strlen(s);
  while (a < b && strchr(" \t\r\n", s[a])) a++;
  while (b > a && strchr(" \t\r\n", s[b - 1])) b--;
  memmove(s, s + a, b - a);
  s[b - a] = '\0';
  return s;
}

int gt_rpc_creds_load(gt_rpc_creds_t *c, const char *token_file, const char *env_token, const char *ca_file,
                      const char *cert_file, const char *key_file, gt_err_t *err) {
  memset(c, 0, sizeof *c);
  int rc = GT_EIO; /* read_text's code */
  if (token_file && token_file[0]) {
    if (!(c->token = read_text("token file", token_file, err))) goto fail;
    if (!trimmed(c->token)[0]) {
      rc = gt_err_set(err, GT_EINVAL, "token file %s is empty", token_file);
      goto fail;
    }
  } else if (env_token && env_token[0]) {
    if (!(c->token = strdup(env_token))) {
      rc = gt_err_set(err, GT_ENOMEM, "out of memory");
      goto fail;
    }
    trimmed(c->token);
  }
  if (ca_file && ca_file[0] && !(c->ca = read_text("TLS CA", ca_file, err))) goto fail;
  if (cert_file && cert_file[0] && !(c->cert = read_text("TLS certificate", cert_file, err))) goto fail;
  if (key_file && key_file[0] && !(c->key = read_text("TLS key", key_file, err))) goto fail;
  if (!c->cert != !c->key) {
    rc = gt_err_set(err, GT_EINVAL, "a TLS certificate needs its key, and a key its certificate");
    goto fail;
  }
  return GT_OK;
fail:
  gt_rpc_creds_free(c);
  return rc;
}

void gt_rpc_creds_free(gt_rpc_creds_t *c) {
  free(c->token);
  free(c->ca);
  free(c->cert);
  free(c->key);
  memset(c, 0, sizeof *c);
}
