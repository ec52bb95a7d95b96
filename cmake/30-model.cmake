# engine/backend/ (interface, CPU reference, sampler) + engine/models/ (qwen3, qwen35, generation,
# decode bench): one library, the models call the backend and the backend nothing above it.
# the ranks' abortable host barrier (also the device-local communicator's, in gantry_cuda)
add_library(gantry_comm_barrier STATIC engine/backend/comm_barrier.c)
target_link_libraries(gantry_comm_barrier PUBLIC Threads::Threads)

add_library(gantry_model STATIC
  engine/backend/backend.c
  engine/backend/backend_cpu.c
  engine/backend/backend_cpu_gdn.c
  engine/backend/comm_cpu.c
  engine/backend/comm_solo.c
  engine/models/model.c
  engine/models/qwen3.c
  engine/models/qwen35.c
  engine/models/qwen35_mtp.c
  engine/models/shard.c
  engine/models/tp.c
  engine/backend/sampler.c
  engine/models/gen.c
  engine/models/embed.c
  engine/models/bench.c
)
target_link_libraries(gantry_model PUBLIC gantry_gguf gantry_common gantry_comm_barrier OpenMP::OpenMP_C m)

# engine/sched/: continuous batching, paged KV with prefix caching, per-request output
add_library(gantry_sched STATIC engine/sched/kv.c engine/sched/seqout.c engine/sched/sched.c engine/sched/sched_mem.c
  engine/sched/spec_ngram.c
  engine/sched/spec_index.c
  engine/sched/spec_suffix.c
  engine/sched/spec_mtp.c engine/sched/spec_cost.c
  engine/sched/constraint.c engine/sched/bad_words.c)
target_link_libraries(gantry_sched PUBLIC gantry_model gantry_grammar gantry_tok gantry_chat gantry_common Threads::Threads)

add_library(gantry_golden STATIC tests/common/golden_model.c)
target_link_libraries(gantry_golden PUBLIC gantry_model gantry_quant gantry_testutil)

# the teacher-forced + greedy run that model comparisons share (tests/common/gen_run.h)
add_library(gantry_gen_run STATIC tests/common/gen_run.c)
target_link_libraries(gantry_gen_run PUBLIC gantry_model gantry_testutil)

gt_add_test(test_qwen3 SOURCES tests/unit/test_qwen3.c LIBS gantry_golden TIMEOUT 900)
# the CPU backend's fused ops (matmul_multi, ffn_swiglu, attn_qk_prep, gdn_conv_qkv) == the unfused op sequences, bitwise
gt_add_test(test_backend_fused SOURCES tests/unit/test_backend_fused.c LIBS gantry_model gantry_quant gantry_testutil
  TIMEOUT 120)
# the KV element type contract (kv_set_type / kv_type / be_kv_token_bytes) on the CPU backend
gt_add_test(test_kv_type SOURCES tests/unit/test_kv_type.c LIBS gantry_model TIMEOUT 60)

# qwen3-tiny on the CPU backend for scheduler-level tests (tests/common/model_fx.h)
add_library(gantry_model_fx STATIC tests/common/model_fx.c)
target_link_libraries(gantry_model_fx PUBLIC gantry_sched gantry_model gantry_tok gantry_testutil)
gt_add_test(test_sched SOURCES tests/unit/test_sched.c LIBS gantry_sched gantry_model_fx TIMEOUT 300)
# the scheduler as an embedding engine: batched prefill-only steps, pooled hidden state per request
gt_add_test(test_sched_embed SOURCES tests/unit/test_sched_embed.c LIBS gantry_sched gantry_model_fx TIMEOUT 120)
gt_add_test(test_sched_params SOURCES tests/unit/test_sched_params.c LIBS gantry_sched gantry_model_fx TIMEOUT 300)
# benchmark (prints numbers; not a test): decode ms/step with and without a constraint, per batch size
add_executable(bench_constraint tests/bench/bench_constraint.c)
target_link_libraries(bench_constraint PRIVATE gantry_sched)
# constrained decoding through the scheduler (engine/sched/constraint.h) on qwen3-tiny and the demo model
gt_add_test(test_sched_constraint SOURCES tests/unit/test_sched_constraint.c LIBS gantry_sched gantry_model_fx TIMEOUT 600)
gt_add_test(test_sched_fork SOURCES tests/unit/test_sched_fork.c LIBS gantry_sched gantry_model_fx TIMEOUT 300)
# the memory plan: the pure sizing rule, and sched_create sizing from the backend's reported memory
gt_add_test(test_sched_mem SOURCES tests/unit/test_sched_mem.c LIBS gantry_sched gantry_model_fx TIMEOUT 120)
gt_add_test(test_sampler SOURCES tests/unit/test_sampler.c LIBS gantry_model TIMEOUT 60)
gt_add_test(test_sample_op SOURCES tests/unit/test_sample_op.c LIBS gantry_sched gantry_model_fx TIMEOUT 300)
# tensor parallelism on CPU ranks: the communicator, TP=2/4 against TP=1 on every golden model
# and weight type, unsplittable shapes refused (tests/unit/test_tp.c)
gt_add_test(test_tp SOURCES tests/unit/test_tp.c LIBS gantry_model gantry_gen_run gantry_testutil TIMEOUT 300)
# speculative decoding: output with speculation == output without, on every golden model (tests/unit/test_sched_spec.c)
gt_add_test(test_sched_spec SOURCES tests/unit/test_sched_spec.c LIBS gantry_sched gantry_model_fx TIMEOUT 900)
# benchmark (prints numbers; not a test): decode rate and acceptance length, speculation off vs prompt lookup
add_executable(bench_ngram tests/bench/bench_ngram.c)
target_link_libraries(bench_ngram PRIVATE gantry_sched)
add_executable(bench_spec tests/bench/bench_spec.c)
target_link_libraries(bench_spec PRIVATE gantry_sched)
# verify step vs decode step, and the MTP drafter's cost (tests/bench/bench_verify.c, scripts/gpu/spec.sh)
add_executable(bench_verify tests/bench/bench_verify.c)
target_link_libraries(bench_verify PRIVATE gantry_model gantry_sched) # gantry_sched: sched_spec_draft_vocab
# the GPU-less parts of ranks sharing one GPU and of the TP prediction: the ranks' barrier, the solo
# communicator, a solo rank through the decode bench, GANTRY_MODEL_LAYERS (tests/unit/test_tp_parts.c)
gt_add_test(test_tp_parts SOURCES tests/unit/test_tp_parts.c LIBS gantry_model gantry_testutil TIMEOUT 120)
# one rank's production shapes (qwen3-8b, qwen35-9b, qwen35-27b at TP 2 / 4): plans, products, and
# the rank's attention = the unsharded layer's heads on the CPU (the GPU-less part of test_cuda_ops
# test_tp_shapes_*; tests/unit/test_tp_rank_shapes.c)
gt_add_test(test_tp_rank_shapes SOURCES tests/unit/test_tp_rank_shapes.c tests/common/tp_rank.c
  LIBS gantry_model gantry_quant gantry_testutil TIMEOUT 300)
# embedding pooling: normalization, {arch}.pooling_type, last-token hidden state == the head's input
gt_add_test(test_embed SOURCES tests/unit/test_embed.c LIBS gantry_model gantry_testutil TIMEOUT 120)
gt_add_test(test_bad_words SOURCES tests/unit/test_bad_words.c LIBS gantry_sched TIMEOUT 60)
# prompt lookup's n-gram index (== the scan) and the suffix cache across requests (tests/unit/test_spec_index.c)
gt_add_test(test_spec_index SOURCES tests/unit/test_spec_index.c LIBS gantry_sched TIMEOUT 60)
