/* router/grpc_front.h — the router's gRPC front (rgf_): gantry.v1.Router and gantry.v1.Admin.
 * Calls arrive on gRPC threads and are handed to the loop through the mailbox. */
#ifndef GANTRY_ROUTER_GRPC_FRONT_H
#define GANTRY_ROUTER_GRPC_FRONT_H

#include <stddef.h>

#include "common/err.h"

typedef struct router router_t;
typedef struct rgf rgf_t;

/* Binds cfg.grpc_addr (sets rt->grpc_port); NULL with err filled on failure. */
rgf_t *rgf_start(router_t *rt, gt_err_t *err);
/* Loop thread: ends every call (UNAVAILABLE for those in progress) and shuts the server down;
 * bounded, also while Redis does not answer. g stays for the admission callbacks still due. */
void rgf_stop(rgf_t *g);
/* Frees g after rgf_stop, once adm_destroy dropped the callbacks still due. NULL is a no-op. */
void rgf_free(rgf_t *g);
/* Output queued for gRPC clients and not yet taken by the transport (bytes; 0 for NULL). */
size_t rgf_unsent_bytes(rgf_t *g);
/* Hand-offs from gRPC threads to the loop not yet run (any thread; for tests). */
int rgf_pending_posts(rgf_t *g);
/* Clients' cancels of Generate calls that came after rgf_stop began (rgf_stop ends those calls,
 * counted 499; any thread; for tests). */
int rgf_refused_cancels(rgf_t *g);
/* Admin calls (GetLimits, SetLimits, ListQueues) received and not yet answered (any thread; for
 * tests). */
int rgf_admin_calls(rgf_t *g);

#endif
