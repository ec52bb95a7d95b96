/* engine/backend/backend_cuda.h — the CUDA backend of engine/backend/backend.h (one GPU; one rank of a group: be_cuda_create_rank).
 * Plain C: no CUDA header is visible to includers. */
#ifndef GANTRY_ENGINE_BACKEND_CUDA_H
#define GANTRY_ENGINE_BACKEND_CUDA_H

#include "engine/backend/backend.h"

/* Creates a backend on CUDA device `device` (its own stream and cuBLAS handle). Returns GT_OK
 * and *out (free with be_destroy), GT_EUNSUPPORTED when the build has no CUDA or no such device
 * is present (err says which), or GT_EINTERNAL / GT_ENOMEM on a CUDA failure. */
int be_cuda_create(int device, be_t **out, gt_err_t *err);

struct be_comm;
/* Rank `rank` of a tensor-parallel group on CUDA device `device` (engine/models/tp.h): as
 * be_cuda_create, plus base.rank / base.n_ranks from comm, and its all_reduce op goes through
 * comm (not owned; it must have bind_stream, i.e. the NCCL one: be_comm_nccl_create), queued on
 * this backend's stream and recorded into the decode graphs like any other op. The rank's first
 * decode step of each batch size runs eagerly (the communicator's setup stays outside graph
 * capture). Call it on the thread that will run the rank's steps. comm NULL: one rank, the same
 * backend as be_cuda_create. Errors as be_cuda_create's; GT_EINVAL for a bad rank, a
 * communicator without streams or a device that is not the communicator's rank device. */
int be_cuda_create_rank(int device, int rank, struct be_comm *comm, be_t **out, gt_err_t *err);

/* CUDA devices visible to this process (0 without CUDA or a driver). */
int be_cuda_device_count(void);

/* Step counters: steps replayed from (or captured into) a CUDA graph, steps run eagerly (a step
 * of a kind below that did not use a graph; 0 in steady decode), graph captures (or updates), and
 * a bit mask of the decode batch sizes that have a graph (bit n = batch of n sequences). Kinds:
 *   decode   one token per sequence (the model's own step)
 *   verify   a model step where a sequence has more than one output row (its drafts)
 *   drafter  a step tagged be_batch_t.drafter (the MTP drafter's)
 * Prefill and mixed steps are none of these and are not counted. Decode steps up to
 * BE_GRAPH_MAX_SEQS sequences, and verify / drafter steps whose sequences all bring the same
 * q <= BE_GRAPH_MAX_Q tokens (<= BE_GRAPH_MAX_SEQS tokens in all), use graphs unless
 * GANTRY_CUDA_GRAPHS=0. graph_steps / eager_steps / captures are the sums over the kinds. */
enum { BE_CUDA_STEP_DECODE, BE_CUDA_STEP_VERIFY, BE_CUDA_STEP_DRAFTER, BE_CUDA_STEP_KINDS };
typedef struct {
  long graph_steps, eager_steps, captures;
  be_sizes_t captured_sizes;
  long profiled_steps; /* steps run for be_cuda_profile_arm (not in eager_steps) */
  long kind_graph[BE_CUDA_STEP_KINDS], kind_eager[BE_CUDA_STEP_KINDS], kind_captures[BE_CUDA_STEP_KINDS];
  int shape_graphs;    /* verify / drafter graphs held (at most BE_CUDA_SHAPE_GRAPHS) */
} be_cuda_stats_t;
/* Verify / drafter graphs a backend holds at most, kept by shape (n_seq, q, n_out, drafter), up to
 * 4 variants of a shape whose op sequence differs (backend_cuda_graph.c step_graph); a step of a
 * new shape past that runs eagerly (counted). */
#define BE_CUDA_SHAPE_GRAPHS 128
void be_cuda_get_stats(be_t *be, be_cuda_stats_t *st);

/* Per-op profile of one step (gantry-engine bench / bench_decode).
 * be_cuda_profile_arm: the NEXT step (a decode step or a prefill) is recorded and then run eagerly
 * instead of from a graph (counted in profiled_steps, not eager_steps; the graphs are left as
 * they are) with a cudaEvent pair around
 * each recorded op. When every op of the step can be captured, the ops are queued in chunks
 * behind a host gate (cudaLaunchHostFunc) so the GPU runs each chunk back to back and host
 * launch latency is not counted as op time (gated = 1). Afterwards, graph replays of the same
 * batch size are timed (events around the launch) until be_cuda_profile_get. */
typedef struct {
  char label[64]; /* op kind; ops with a weight matrix add its type, cols x rows and the batch
                   * rows of the product, e.g. "matmul Q4_K 4096x12288 x1" and the path of a product:
                   * "gemm" (bf16 tensor-core GEMM), "deq-gemm" (fast prefill), "mmq" */
  int calls;      /* ops of this label in the step */
  double us;      /* their GPU time, summed */
} be_cuda_prof_t;
typedef struct {
  int batch;       /* sequences of the profiled step */
  int n_ops;       /* ops it ran */
  double ops_us;   /* their GPU time, summed (every op, also those past `max` rows) */
  int gated;       /* 1: ops queued ahead of the GPU (see above); 0: launch gaps are in the times */
  int graph_steps; /* graph replays of the same batch size timed after it */
  double graph_us; /* their mean GPU time (0 when none) */
} be_cuda_prof_sum_t;
void be_cuda_profile_arm(be_t *be);
/* Copies the profiled step's rows, most time first, into out[max] and its totals into *sum;
 * returns the number of rows copied, 0 when no step was profiled since the arm. Stops the
 * graph timing and disarms. */
int be_cuda_profile_get(be_t *be, be_cuda_prof_t *out, int max, be_cuda_prof_sum_t *sum);

/* Activation precision of the products (process-wide; not thread-safe: set before serving):
 * - "bf16" (the default, BE_CUDA_ACTIVATIONS_DEFAULT): x rounded to bf16 (one part) in every
 *   product of 3 or more rows (decode batches: kernels/mmq with the weights' exact small
 *   integers; BF16 weights: one cuBLAS GEMM) and prefill products of K-quant / Q8_0 weights take
 *   the "fast" path below. The fixtures README holds such a backend to its bf16-activations bar
 *   (tests/gpu/test_cuda_golden.c). Batches of 1-2 rows keep the exact matvec kernels, so a
 *   sequence's logits depend on how many rows its step carried (as in other bf16 servers).
 * - "fp32": x carried as 3 bf16 parts in decode batches and 2 in prefill (products within
 *   ~1e-6 of fp32, batch-invariant), prefill products on the exact mmq path: the reference mode
 *   (CPU-identical greedy text in tests/unit/test_sched_*.c on CUDA).
 * be_cuda_set_activations("bf16" | "fp32") overrides GANTRY_ACTIVATIONS (NULL: back to the
 * environment / default); returns 0, or -1 for another name. */
#define BE_CUDA_ACTIVATIONS_DEFAULT "bf16"
int be_cuda_set_activations(const char *name);
/* "bf16" or "fp32": the setting products use now. */
const char *be_cuda_activations(void);

/* Prefill products of K-quant and Q8_0 weights (more than 64 rows of x; decode batches are not
 * affected), process-wide:
 * - "exact": kernels/mmq (the exact small integers of the weights in bf16, scales in fp32; x in
 *   one bf16 part with bf16 activations, else GANTRY_PREFILL_XPARTS parts, default 2: op error
 *   2-6e-6);
 * - "fast": each weight dequantized to bf16 (rounded to nearest even, 2^-9 relative) tile by tile
 *   into scratch and multiplied by cuBLAS bf16 GEMMs with fp32 accumulation; x in one bf16 part
 *   with bf16 activations (or GANTRY_PREFILL_XPARTS=1), else hi + lo (two GEMMs).
 * The default follows the activations (bf16: fast, fp32: exact) unless GANTRY_PREFILL_PRECISION=
 * exact|fast says otherwise. be_cuda_set_prefill_precision("exact" | "fast") overrides both (NULL:
 * back to the default); returns 0, or -1 for another name. Not thread-safe: call before serving. */
int be_cuda_set_prefill_precision(const char *name);
/* "exact" or "fast": the setting products use now. */
const char *be_cuda_prefill_precision(void);

/* 1 if this build has the CUDA backend and at least one device is visible. */
int be_cuda_available(void);

#endif
