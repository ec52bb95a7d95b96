/* engine/cli/cli.h — shared pieces of the gantry-engine subcommands. Each cmd_*.c implements
 * one subcommand `int cmd_NAME(int argc, char **argv)` returning the process exit code; errors
 * are one line on stderr ("gantry-engine: error: ..."). */
#ifndef GANTRY_ENGINE_CLI_H
#define GANTRY_ENGINE_CLI_H

#include <stdint.h>

#include "format/gguf.h"
#include "engine/models/model.h"

/* A model opened for a subcommand. */
typedef struct {
  gguf_t *gguf;
  be_t *be;
  model_t *model;
} cli_model_t;

/* Creates the backend named by device: "cpu" (threads <= 0: OMP_NUM_THREADS or every core),
 * "cuda" or "cuda:N" (builds with the CUDA backend). Prints the error, returns non-zero. */
int cli_create_backend(const char *device, int threads, be_t **out);
/* Tensor parallelism options (--tp N, --devices LIST) of serve, bench, generate and eval. */
typedef struct {
  long tp;             /* ranks, default 1 */
  const char *devices; /* comma-separated CUDA ordinals, one per rank (NULL: 0..tp-1) */
} cli_tp_t;
#define CLI_TP_OPTS {"tp", 1, 0, CLI_OPT_TP}, {"devices", 1, 0, CLI_OPT_DEVICES}
enum { CLI_OPT_TP = 1000, CLI_OPT_DEVICES };
#define CLI_TP_HELP                                                                              \
  "  --tp N                  tensor parallelism over N ranks in this process (default 1)\n"  \
  "  --devices LIST          CUDA devices of the ranks, e.g. 0,1 (default 0..N-1)\n"
/* Handles a getopt result c of CLI_TP_OPTS into t; 1 when c was one of them, -1 bad value
 * (printed), 0 otherwise. */
int cli_tp_opt(int c, const char *arg, cli_tp_t *t);
/* The CUDA ordinals of n ranks: 1 when n > 1 and all are one GPU (the device-local communicator),
 * 0 when all differ (NCCL), -1 when some repeat and some differ (refused). */
int cli_tp_device_mode(const int *dev, int n);

/* Loads g on device with threads CPU threads in all: with tp->tp <= 1 one backend and
 * model_load (the same path as without the option; --devices D then means device cuda:D); with
 * more, a rank group (engine/models/tp.h): CPU ranks (threads split between them) over the
 * in-process communicator, or, with --device cuda, CUDA ranks (rank r on --devices[r], default
 * r) over the NCCL communicator. GANTRY_TP_FORCE_GROUP=1 makes one rank a group too (on CUDA:
 * the NCCL path on one GPU). CUDA ranks are refused with a clear error when the build has no
 * CUDA backend, NCCL is absent from the build or cannot be loaded, or fewer GPUs are visible
 * than the ranks need. --devices must list one ordinal per rank. When check_bytes > 0 the free
 * memory is checked against it first (CUDA ranks: each rank's device against its even share).
 * Prints the error; returns 0, 1, or 2 (not enough memory). Free *m then *be. */
int cli_load_model(const gguf_t *g, const char *path, const char *device, int threads, const cli_tp_t *tp,
                   int max_tokens, uint64_t check_bytes, be_t **be, model_t **m);

/* Opens path on that backend (tp: NULL or --tp/--devices) with scratch for max_tokens tokens.
 * Prints the error and returns non-zero on failure. */
int cli_open_model(const char *path, const char *device, int threads, const cli_tp_t *tp, int max_tokens,
                   cli_model_t *out);
void cli_close_model(cli_model_t *m);

/* --kv-dtype V ("bf16" or "fp32"; NULL: the backend's default, bf16 on CUDA) applied to be
 * before its KV pool is made; be NULL only checks V. Prints the error, returns non-zero. */
int cli_kv_dtype(be_t *be, const char *v);
#define CLI_KV_DTYPE_HELP "  --kv-dtype T            KV cache element type: bf16 (CUDA default) or fp32\n"
/* --activations V ("bf16" or "fp32"; NULL: the default / GANTRY_ACTIVATIONS): the activation
 * precision of the CUDA backend's products (be_cuda_set_activations, backend_cuda.h); no effect
 * on the CPU backend (fp32). Prints the error, returns non-zero. */
int cli_activations(const char *v);
#define CLI_ACTIVATIONS_HELP                                                                          \
  "  --activations A         CUDA products: bf16 (default: x rounded to bf16 in batches of 3+ rows\n" \
  "                          and prefill, tensor-core speed) or fp32 (x within ~1e-6 of fp32,\n"   \
  "                          batch-invariant; the reference mode); see kernels/README.md\n"
/* --prefill-precision V ("exact" or "fast"; NULL: the default / GANTRY_PREFILL_PRECISION): the
 * CUDA backend's prefill products of K-quant weights (be_cuda_set_prefill_precision); no effect on
 * the CPU backend. Prints the error, returns non-zero. */
int cli_prefill_precision(const char *v);
#define CLI_PREFILL_PRECISION_HELP                                                                   \
  "  --prefill-precision P   CUDA prefill products of K-quant weights: exact (tensor-core mmq) or\n" \
  "                          fast (bf16-dequantized weights + cuBLAS; default with bf16 activations)\n"

/* Prints "gantry-engine: error: <fmt>" and returns exit code 1. */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Parses "1,2,3" into a malloc'd array; returns count or -1 (message printed). */
int cli_parse_ids(const char *s, int32_t **ids);
/* Parses a decimal int / float option value with range checks; prints and returns -1 if bad. */
int cli_int(const char *opt, const char *v, long lo, long hi, long *out);
int cli_float(const char *opt, const char *v, double lo, double hi, double *out);
/* Parses "on" / "off" into 1 / 0; prints and returns -1 if neither. */
int cli_on_off(const char *opt, const char *v, int *out);

int cmd_generate(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_bench(int argc, char **argv);

#endif
