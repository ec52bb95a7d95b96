/* common/grpc_creds.h — what authenticates the router <-> engine link, read from files: a
 * shared token (sent as "authorization: Bearer <token>") and TLS material (PEM). The engine uses
 * it for its server (gt_rpc_server_opts_t), the router for its engine clients
 * (gt_rpc_client_opts_t). */
#ifndef GANTRY_COMMON_GRPC_CREDS_H
#define GANTRY_COMMON_GRPC_CREDS_H

#include "common/err.h"

typedef struct gt_rpc_creds {
  char *token;              /* NULL: no token */
  char *ca, *cert, *key;    /* PEM text, or NULL */
} gt_rpc_creds_t;

/* Reads the files that are named (NULL or "": not used) into c (zeroed first). The token file's
 * content is trimmed of surrounding whitespace and must not be empty; env_token (the value of an
 * environment variable, may be NULL) is used when no token file is named. On error c is freed
 * and err names the file. */
int gt_rpc_creds_load(gt_rpc_creds_t *c, const char *token_file, const char *env_token, const char *ca_file,
                      const char *cert_file, const char *key_file, gt_err_t *err);
void gt_rpc_creds_free(gt_rpc_creds_t *c);

#endif
