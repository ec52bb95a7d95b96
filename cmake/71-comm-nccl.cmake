# NCCL communicator (engine/backend/comm_nccl.c), its benchmark (bench_comm) and tests (issue 13).
# gantry_comm_nccl gets GANTRY_HAVE_NCCL when the CUDA toolkit and nccl.h are found; libnccl
# itself is loaded at run time (dlopen), so nothing links against it and programs start on
# machines without it. Without nccl.h the same API fails with "built without NCCL".
# gantry_comm_nccl_stub is always that no-NCCL build, so its error path is tested everywhere.
option(GANTRY_NCCL "Build the NCCL communicator when nccl.h is found" ON)
add_library(gantry_comm_nccl STATIC engine/backend/comm_nccl.c engine/backend/comm_nccl_be.c)
target_link_libraries(gantry_comm_nccl PUBLIC gantry_common)
add_library(gantry_comm_nccl_stub STATIC engine/backend/comm_nccl.c engine/backend/comm_nccl_be.c)
target_link_libraries(gantry_comm_nccl_stub PUBLIC gantry_common)

if(GANTRY_NCCL AND TARGET CUDA::cudart_static)
  find_path(GANTRY_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include)
  find_library(GANTRY_NCCL_LIBRARY NAMES libnccl.so.2 nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64
               /usr/local/cuda/lib)
  set(GANTRY_NCCL_OK OFF)
  if(GANTRY_NCCL_INCLUDE_DIR)
    set(GANTRY_NCCL_OK ON)
    # the API used (windows, revoke) needs the 2.28 header
    file(STRINGS ${GANTRY_NCCL_INCLUDE_DIR}/nccl.h GANTRY_NCCL_VERSION_LINES REGEX "^#define NCCL_(MAJOR|MINOR) ")
    string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*" "\\1" GANTRY_NCCL_MAJOR "${GANTRY_NCCL_VERSION_LINES}")
    string(REGEX REPLACE ".*NCCL_MINOR ([0-9]+).*" "\\1" GANTRY_NCCL_MINOR "${GANTRY_NCCL_VERSION_LINES}")
    if("${GANTRY_NCCL_MAJOR}.${GANTRY_NCCL_MINOR}" VERSION_LESS 2.28)
      message(STATUS "NCCL: ${GANTRY_NCCL_INCLUDE_DIR}/nccl.h is ${GANTRY_NCCL_MAJOR}.${GANTRY_NCCL_MINOR} (< 2.28): communicator built without NCCL")
      set(GANTRY_NCCL_OK OFF)
    endif()
  endif()
  if(GANTRY_NCCL_OK)
    target_include_directories(gantry_comm_nccl PRIVATE ${GANTRY_NCCL_INCLUDE_DIR})
    target_compile_definitions(gantry_comm_nccl PUBLIC GANTRY_HAVE_NCCL=1)
    if(GANTRY_NCCL_LIBRARY)
      # last fallback of the run-time search (after $GANTRY_NCCL_LIB / LD_LIBRARY_PATH)
      target_compile_definitions(gantry_comm_nccl PRIVATE GANTRY_NCCL_LIB_DEFAULT="${GANTRY_NCCL_LIBRARY}")
    endif()
    target_link_libraries(gantry_comm_nccl PUBLIC CUDA::cudart_static ${CMAKE_DL_LIBS})
    message(STATUS "NCCL: ${GANTRY_NCCL_INCLUDE_DIR}/nccl.h (libnccl loaded at run time; found: ${GANTRY_NCCL_LIBRARY})")
  elseif(NOT GANTRY_NCCL_INCLUDE_DIR)
    message(STATUS "NCCL: nccl.h not found, communicator built without NCCL")
  endif()
endif()

# the no-NCCL path: every call gives the clear error
gt_add_test(test_comm_nccl_stub SOURCES tests/unit/test_comm_nccl.c LIBS gantry_comm_nccl_stub TIMEOUT 60)
target_compile_definitions(test_comm_nccl_stub PRIVATE COMM_NCCL_STUB)
# the real build on this machine: argument checks, and with no GPU (or no libnccl) the clear error
gt_add_test(test_comm_nccl SOURCES tests/unit/test_comm_nccl.c LIBS gantry_comm_nccl TIMEOUT 60)

if(TARGET CUDA::cudart_static AND TARGET gantry_cuda)
  # --device cuda --tp N: CUDA ranks over the NCCL communicator (engine/cli/cli.c)
  target_link_libraries(gantry-engine PRIVATE gantry_comm_nccl)
  # GPU: one rank through the group and NCCL = the plain CUDA backend (bit-identical), the
  # all-reduce inside the decode graphs; TP=2 vs TP=1 with >= 2 GPUs (tests/gpu/test_cuda_tp.c)
  gt_add_test(test_cuda_tp SOURCES tests/gpu/test_cuda_tp.c
    LIBS gantry_cuda gantry_comm_nccl gantry_model gantry_gen_run gantry_testutil TIMEOUT 300)
  set_tests_properties(test_cuda_tp PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
endif()

if(TARGET CUDA::cudart_static)
  # benchmark (prints numbers; its own sum check decides the exit status): tools/bench/comm_bench.c
  add_executable(bench_comm tools/bench/comm_bench.c)
  target_link_libraries(bench_comm PRIVATE gantry_comm_nccl gantry_gguf CUDA::cudart_static m)
  # bench_comm with every GPU hidden (and bad arguments): skips with exit 77 and says why
  gt_add_test(test_comm_bench_skip SOURCES tests/unit/test_comm_bench_skip.c LIBS gantry_testutil TIMEOUT 60)
  add_dependencies(test_comm_bench_skip bench_comm)
  # GPU: a thread per rank, eager + captured + replayed all-reduce, both methods and dtypes
  gt_add_test(test_comm_nccl_gpu SOURCES tests/gpu/test_comm_nccl_gpu.c LIBS gantry_comm_nccl CUDA::cudart_static TIMEOUT 120)
  set_tests_properties(test_comm_nccl_gpu PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
endif()

# scripts/gpu/tp.sh's helpers (the T(n) = a + w/n fit, the TP-n vs TP-1 logits comparison)
add_test(NAME test_tp_scripts COMMAND bash ${CMAKE_SOURCE_DIR}/tests/unit/test_tp_scripts.sh ${CMAKE_SOURCE_DIR})
