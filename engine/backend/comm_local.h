/* engine/backend/comm_local.h — the device-local communicator: N CUDA ranks of one process on ONE
 * GPU (`--tp N --devices 0,0,...`), a test and measurement backend for sharded kernels where NCCL
 * (which refuses two ranks on one device) cannot go; distinct GPUs use NCCL (comm_nccl.h). Plain C.
 *
 * all_reduce(c, rank, x, n) sums the ranks' x (fp32, device memory of that GPU) in rank order,
 * ((x0 + x1) + x2) + ..., with every rank getting bit-identical values: per round of up to 1M
 * floats, three kernels on the rank's stream (kernels/allreduce_local.cuh: copy into a stage slot
 * and announce, wait for every rank's announcement, sum), synchronised through counters in device
 * memory, so the launches can be captured into the ranks' decode graphs and replayed. Deadlock
 * freedom rests on one rule: no rank's stream ever waits for work a peer has not queued yet, so a
 * host call that synchronises the device (cudaFree, lazy module loading) never waits on a peer's
 * host thread. all_reduce keeps it with a host rendezvous between the copy and the wait; a recorded
 * decode step keeps it through step_gate (every rank agrees on replay / capture / eager, and no rank
 * launches its graph before every rank has captured and instantiated), with all_reduce_captured
 * inside the capture. engine/TP.md "Ranks sharing one GPU" has the argument in full.
 * A wait that lasts longer than $GANTRY_LOCAL_AR_TIMEOUT_S (default 30 s) stops every rank's waits
 * and `check` reports it: a peer that never arrives is an error, never a hang. abort releases host
 * and device waits. */
#ifndef GANTRY_ENGINE_COMM_LOCAL_H
#define GANTRY_ENGINE_COMM_LOCAL_H

#include "engine/backend/comm.h"

/* n_ranks (1..16) ranks on CUDA device `device`. GT_OK and *out (be_comm_destroy after every rank's
 * backend is gone); GT_EUNSUPPORTED when the device is not visible, GT_EINVAL for a bad count,
 * GT_EINTERNAL / GT_ENOMEM on a CUDA failure. Sets CUDA_DEVICE_MAX_CONNECTIONS=32 unless set (the
 * ranks' streams then get hardware queues of their own when the context is created after it). */
int be_comm_local_create(int device, int n_ranks, be_comm_t **out, gt_err_t *err);
/* One line for logs: "device-local communicator: 4 ranks on cuda:0 (rank-order sums, ...)". */
const char *be_comm_local_describe(be_comm_t *c, char *buf, size_t cap);

#endif
