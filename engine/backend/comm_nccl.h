/* engine/backend/comm_nccl.h — the NCCL communicator of the CUDA backend: one process, N GPUs,
 * one rank per GPU (issue 13). Plain C: no CUDA or NCCL header is visible to includers; a CUDA
 * stream is passed as `void *` (a cudaStream_t).
 *
 * Contract shared with the CPU communicator (engine/backend/comm.h, the `be_comm_t` interface):
 * - init_all(devices, n) makes the N ranks at once; rank r lives on devices[r].
 * - all_reduce(comm, rank, ptr, count, dtype, stream) sums `count` elements of `dtype` in place
 *   over all ranks: afterwards every rank's ptr holds the same sum. Every rank must make the same
 *   sequence of calls (same count and dtype, same order); a rank's call returns once the work is
 *   queued on its stream (no host synchronisation), the result is ready when the stream reaches
 *   that point.
 * - destroy releases everything init_all and buffers_alloc made.
 *
 * Threads: one thread per rank, each calling all_reduce for its own rank only (the engine's
 * worker threads). Driving several ranks from one thread needs NCCL group calls and, with CUDA
 * graphs, can deadlock in cudaGraphLaunch (NCCL's documentation): this API does not offer it.
 * init_all, buffers_alloc, buffers_free and destroy are called from one (any) thread while no
 * rank is communicating.
 *
 * CUDA graphs: all_reduce may be captured into a CUDA graph (stream capture of `stream`). What
 * that requires: every rank's thread captures the same collectives in the same order on the
 * stream it passes (the one being captured, on that rank's device), in
 * cudaStreamCaptureModeThreadLocal (NCCL's advice for a thread per GPU; the decode graphs use
 * it), with no host synchronisation between begin and end of capture, the buffers stay allocated (and, for the symmetric method,
 * registered) for the graph's lifetime, and replays of the N graphs are launched in the same
 * order on every rank, each by its rank's thread. Run one eager collective of each size first so that NCCL's lazy setup
 * (connections, buffers) happens outside capture.
 *
 * Methods:
 * - NCCL_COMM_PLAIN: ncclAllReduce on buffers from cudaMalloc.
 * - NCCL_COMM_SYMMETRIC: buffers from ncclMemAlloc, registered with ncclCommWindowRegister(...,
 *   NCCL_WIN_COLL_SYMMETRIC) (NCCL >= 2.27), so NCCL can use its symmetric-memory kernels
 *   (low latency for small all-reduces over NVLink). The method is a property of the buffer:
 *   allocate collective buffers with nccl_comm_buffers_alloc. all_reduce also takes any other
 *   device memory of the rank (then NCCL uses its plain path).
 *
 * NVLink multicast (NVLS) stays off: init_all sets NCCL_NVLS_ENABLE=0 unless the operator has
 * set it (on the shared GPU hosts NVLS can take the machine's GPUs out of service).
 *
 * libnccl is loaded at run time (dlopen), so programs built with NCCL still start where it is
 * absent: the path in $GANTRY_NCCL_LIB if set, else "libnccl.so.2" through the loader's search
 * path (LD_LIBRARY_PATH), else the libnccl CMake found at build time. Builds without nccl.h (no
 * GANTRY_HAVE_NCCL) keep this API; every call then fails with GT_EUNSUPPORTED "built without
 * NCCL". */
#ifndef GANTRY_ENGINE_COMM_NCCL_H
#define GANTRY_ENGINE_COMM_NCCL_H

#include <stddef.h>

#include "common/err.h"
#include "engine/backend/comm.h"
#include "format/dtype.h"

typedef struct nccl_comm nccl_comm_t;

typedef enum { NCCL_COMM_PLAIN = 0, NCCL_COMM_SYMMETRIC = 1 } nccl_comm_method_t;

/* Static name of a method ("plain", "symmetric"). */
const char *nccl_comm_method_name(nccl_comm_method_t m);

/* Makes an N-rank clique with ncclCommInitAll over devices[0..n-1] (distinct CUDA device
 * ordinals; NULL: devices 0..n-1). Returns GT_OK and *out (free with nccl_comm_destroy);
 * GT_EUNSUPPORTED when the build has no NCCL, libnccl cannot be loaded, or fewer devices are
 * visible than asked (err says which); GT_EINVAL on a bad n or device list; GT_EINTERNAL on a
 * CUDA / NCCL failure. */
int nccl_comm_init_all(const int *devices, int n, nccl_comm_t **out, gt_err_t *err);

/* Ranks in the clique; the CUDA device of a rank. */
int nccl_comm_size(const nccl_comm_t *c);
int nccl_comm_device(const nccl_comm_t *c, int rank);

/* One line for logs into buf, e.g. "NCCL 2.28.9 (libnccl.so.2), 2 ranks, NVLS off, symmetric
 * windows available, revoke available"; returns buf. */
const char *nccl_comm_describe(const nccl_comm_t *c, char *buf, size_t cap);

/* Allocates one device buffer of `bytes` per rank into ptrs[0..n-1] (ptrs[r] on rank r's
 * device), for method m. Symmetric: ncclMemAlloc + ncclCommWindowRegister of every rank (a
 * collective, issued here inside one NCCL group); GT_EUNSUPPORTED when the loaded libnccl has no
 * windows. On failure nothing stays allocated and ptrs[] are NULL. Free with
 * nccl_comm_buffers_free before nccl_comm_destroy. */
int nccl_comm_buffers_alloc(nccl_comm_t *c, size_t bytes, nccl_comm_method_t m, void **ptrs, gt_err_t *err);
/* Releases (deregisters, frees) a set from nccl_comm_buffers_alloc; NULL entries are skipped;
 * ptrs[] are set to NULL. The ranks' streams must be idle on these buffers. */
void nccl_comm_buffers_free(nccl_comm_t *c, void **ptrs);

/* In-place sum over all ranks of count elements of dtype (GT_TYPE_F32 or GT_TYPE_BF16) at ptr
 * (rank's device memory) on `stream` (a cudaStream_t of rank's device; NULL: the legacy default
 * stream). Queues only: see the contract above. GT_EINVAL on a bad rank or dtype,
 * GT_EINTERNAL when NCCL refuses (err has NCCL's message). */
int nccl_comm_all_reduce(nccl_comm_t *c, int rank, void *ptr, size_t count, gt_type_t dtype, void *stream,
                         gt_err_t *err);

/* Stops the clique after a rank failed, from any thread, so that no rank waits for it forever
 * (comm.h's abort): from now on all_reduce returns GT_ECANCELLED without touching NCCL, and
 * every rank's communicator is revoked (ncclCommRevoke, NCCL >= 2.28): collectives already
 * queued or running stop, so a rank waiting on its stream is released (the data is then
 * unspecified). GT_OK; GT_EUNSUPPORTED when the loaded libnccl has no revoke (the clique is
 * still marked, but work already queued can stay blocked). Idempotent; NULL is a no-op.
 * nccl_comm_destroy follows once every rank has stopped using the clique. */
int nccl_comm_abort(nccl_comm_t *c);

/* Destroys the clique (ncclCommDestroy per rank; ncclCommAbort after nccl_comm_abort, without
 * waiting for queued work). Buffers not freed are freed here. NULL is a no-op. */
void nccl_comm_destroy(nccl_comm_t *c);

/* Loads libnccl (as init_all does) without making a clique: GT_OK, or GT_EUNSUPPORTED when the
 * build has no NCCL or libnccl cannot be loaded (err says which). */
int nccl_comm_load(gt_err_t *err);

/* ---- the clique as the engine's communicator (comm.h), engine/backend/comm_nccl_be.c ----
 * be_comm_nccl_create: init_all over devices[0..n-1] wrapped as a be_comm_t ("nccl") that the
 * group owns (be_comm_destroy destroys the clique). Each rank's backend binds its stream
 * (be_cuda_create_rank -> ops->bind_stream) before its first all_reduce; all_reduce(c, rank, x,
 * n) then queues an in-place fp32 sum over the ranks on that stream (nccl_comm_all_reduce, plain
 * method: x is the backend's own memory), abort is nccl_comm_abort. Errors as init_all's. */
int be_comm_nccl_create(const int *devices, int n, be_comm_t **out, gt_err_t *err);
/* The clique inside a communicator from be_comm_nccl_create (for logs: nccl_comm_describe). */
nccl_comm_t *be_comm_nccl(be_comm_t *c);

#endif
