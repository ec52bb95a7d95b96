# CUDA backend (kernels/*.cu + engine/backend/backend_cuda*.c) and its GPU tests.
# Enabled only when a CUDA compiler is found. Targets that link gantry_cuda get the compile
# definition GANTRY_HAVE_CUDA. Architectures: GANTRY_CUDA_ARCHS (default 90 = H100/H200).
include(CheckLanguage)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  set(GANTRY_CUDA_ARCHS "90" CACHE STRING "CUDA architectures to build kernels for (list)")
  # line tables for profilers (ncu source view); scripts/gpu/pack.sh turns them off (with
  # CMAKE_CUDA_ARCHITECTURES 90-real: no PTX) to ship programs a quarter of the size
  option(GANTRY_CUDA_LINEINFO "nvcc -lineinfo" ON)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES ${GANTRY_CUDA_ARCHS})
  endif()
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)

  file(GLOB GANTRY_CUDA_KERNELS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/kernels/*.cu)
  add_library(gantry_cuda STATIC engine/backend/backend_cuda.c engine/backend/backend_cuda_ops.c engine/backend/backend_cuda_graph.c
                                 engine/backend/comm_local.c
                                 ${GANTRY_CUDA_KERNELS})
  # the directory-wide gcc warning flags are not nvcc options: restate them per language
  set_property(TARGET gantry_cuda PROPERTY COMPILE_OPTIONS "")
  target_compile_options(gantry_cuda PRIVATE
    $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers>
    $<$<AND:$<COMPILE_LANGUAGE:C>,$<BOOL:${GANTRY_WERROR}>>:-Werror>
    $<$<COMPILE_LANGUAGE:CUDA>:-O3 -Xcompiler=-Wall,-Wno-unused-parameter>
    $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${GANTRY_CUDA_LINEINFO}>>:-lineinfo>)
  set_target_properties(gantry_cuda PROPERTIES CUDA_RUNTIME_LIBRARY Static POSITION_INDEPENDENT_CODE ON)
  target_compile_definitions(gantry_cuda PUBLIC GANTRY_HAVE_CUDA=1)
  target_link_libraries(gantry_cuda PUBLIC gantry_common gantry_comm_barrier CUDA::cudart_static CUDA::cublas)

  # GPU tests: skip (cmocka skip with a message) when no device is visible
  gt_add_test(test_cuda_ops SOURCES tests/gpu/test_cuda_ops.c tests/common/tp_rank.c
    LIBS gantry_cuda gantry_model gantry_quant gantry_testutil TIMEOUT 300)
  gt_add_test(test_cuda_golden SOURCES tests/gpu/test_cuda_golden.c
    LIBS gantry_cuda gantry_golden TIMEOUT 600)
  set_tests_properties(test_cuda_ops test_cuda_golden PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
  gt_add_test(test_cuda_sample SOURCES tests/gpu/test_cuda_sample.c
    LIBS gantry_cuda gantry_model gantry_testutil TIMEOUT 300)
  set_tests_properties(test_cuda_sample PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
  # the KV pool sized from the GPU's memory (--kv-memory fraction, default)
  gt_add_test(test_cuda_kvmem SOURCES tests/gpu/test_cuda_kvmem.c
    LIBS gantry_cuda gantry_sched gantry_model_fx TIMEOUT 300)
  set_tests_properties(test_cuda_kvmem PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
  # the device-local communicator alone: N threads on GPU 0, eager / captured + replayed sums, abort, timeout
  gt_add_test(test_comm_local_gpu SOURCES tests/gpu/test_comm_local_gpu.c LIBS gantry_cuda TIMEOUT 120)
  set_tests_properties(test_comm_local_gpu PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
  # logit_bias / stop ids / output options with the CUDA backend (biased rows sample on the host)
  gt_add_test(test_cuda_sched_params SOURCES tests/unit/test_sched_params.c
    LIBS gantry_cuda gantry_sched gantry_model_fx TIMEOUT 300)
  target_compile_definitions(test_cuda_sched_params PRIVATE SCHED_PARAMS_CUDA)
  set_tests_properties(test_cuda_sched_params PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
  # constrained decoding with the CUDA backend: masks uploaded per step, logits_mask before sampling
  gt_add_test(test_cuda_sched_constraint SOURCES tests/unit/test_sched_constraint.c
    LIBS gantry_cuda gantry_sched gantry_model_fx TIMEOUT 600)
  target_compile_definitions(test_cuda_sched_constraint PRIVATE SCHED_CONS_CUDA)
  set_tests_properties(test_cuda_sched_constraint PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
  # n > 1: forks copy KV blocks and recurrent state on the device
  gt_add_test(test_cuda_sched_fork SOURCES tests/unit/test_sched_fork.c
    LIBS gantry_cuda gantry_sched gantry_model_fx TIMEOUT 300)
  target_compile_definitions(test_cuda_sched_fork PRIVATE SCHED_FORK_CUDA)
  set_tests_properties(test_cuda_sched_fork PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
  # speculative decoding: output with speculation == without, fp32 activations and KV (verify steps run eagerly)
  gt_add_test(test_cuda_sched_spec SOURCES tests/unit/test_sched_spec.c
    LIBS gantry_cuda gantry_sched gantry_model_fx TIMEOUT 900)
  target_compile_definitions(test_cuda_sched_spec PRIVATE SCHED_SPEC_CUDA)
  set_tests_properties(test_cuda_sched_spec PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
  # the MTP drafter on the GPU: its forward against the plain reference, greedy identity (fp32 activations and KV)
  gt_add_test(test_cuda_qwen35_mtp SOURCES tests/unit/test_qwen35_mtp.c
    LIBS gantry_cuda gantry_sched gantry_model_fx gantry_quant TIMEOUT 600)
  target_compile_definitions(test_cuda_qwen35_mtp PRIVATE MTP_CUDA)
  set_tests_properties(test_cuda_qwen35_mtp PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
endif()

if(CMAKE_CUDA_COMPILER)
  # benchmarks (print numbers; never a pass/fail test)
  add_executable(bench_decode tools/bench/bench_decode.c)
  set_target_properties(bench_decode PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}"
                                                CUDA_RUNTIME_LIBRARY Static)
  target_link_libraries(bench_decode PRIVATE gantry_cuda gantry_model)
  # GDN scan kernels at qwen35-9b head sizes (decode and chunked prefill), CPU check included
  add_executable(bench_gdn_scan tools/bench/bench_gdn_scan.c engine/backend/gdn_chunked.c)
  set_target_properties(bench_gdn_scan PROPERTIES CUDA_RUNTIME_LIBRARY Static)
  target_link_libraries(bench_gdn_scan PRIVATE gantry_cuda m)
  # decode matvec (kc_matvec / multi / swiglu) at qwen3-8b shapes, host check included
  add_executable(bench_matvec tools/bench/bench_matvec.cu)
  set_target_properties(bench_matvec PROPERTIES CUDA_RUNTIME_LIBRARY Static)
  set_property(TARGET bench_matvec PROPERTY COMPILE_OPTIONS "") # gcc warning flags are not nvcc options
  target_compile_options(bench_matvec PRIVATE -O3 -Xcompiler=-Wall,-Wno-unused-parameter)
  target_link_libraries(bench_matvec PRIVATE gantry_cuda gantry_quant m)
  # pipelined decode product (kernels/gemv_pipe*.cuh): variants x model shapes x 1..8 rows vs kc_matvec / mmq
  add_executable(bench_gemv tools/bench/bench_gemv.cu)
  set_target_properties(bench_gemv PROPERTIES CUDA_RUNTIME_LIBRARY Static)
  set_property(TARGET bench_gemv PROPERTY COMPILE_OPTIONS "")
  target_compile_options(bench_gemv PRIVATE -O3 -Xcompiler=-Wall,-Wno-unused-parameter)
  target_link_libraries(bench_gemv PRIVATE gantry_cuda gantry_quant m)
  # attention kernels: bf16 split decode vs fp32, flash prefill vs fp32 (GB/s, TFLOP/s)
  add_executable(bench_attn tools/bench/bench_attn.cu)
  set_target_properties(bench_attn PROPERTIES CUDA_RUNTIME_LIBRARY Static)
  set_property(TARGET bench_attn PROPERTY COMPILE_OPTIONS "")
  target_compile_options(bench_attn PRIVATE -O3 -Xcompiler=-Wall,-Wno-unused-parameter)
  target_link_libraries(bench_attn PRIVATE gantry_cuda m)
endif()

if(TARGET gantry_cuda)
  # bench_constraint --device cuda
  target_link_libraries(bench_constraint PRIVATE gantry_cuda)
  set_target_properties(bench_constraint PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}"
                                                    CUDA_RUNTIME_LIBRARY Static)
  # bench_spec --device cuda
  target_link_libraries(bench_spec PRIVATE gantry_cuda)
  set_target_properties(bench_spec PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}" CUDA_RUNTIME_LIBRARY Static)
  # bench_verify --device cuda (scripts/gpu/spec.sh)
  target_link_libraries(bench_verify PRIVATE gantry_cuda)
  set_target_properties(bench_verify PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}" CUDA_RUNTIME_LIBRARY Static)
  # gantry-engine --device cuda (GANTRY_HAVE_CUDA comes with the library)
  target_link_libraries(gantry-engine PRIVATE gantry_cuda)
  set_target_properties(gantry-engine PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}"
                                                 CUDA_RUNTIME_LIBRARY Static)
endif()
