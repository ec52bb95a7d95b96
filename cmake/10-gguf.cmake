# format/: ggml weight types (dtype), the GGUF reader and writer (the tokenizer: 20-tokenizer.cmake).
add_library(gantry_gguf STATIC format/dtype.c format/gguf.c format/gguf_write.c)
target_link_libraries(gantry_gguf PUBLIC gantry_common m)
gt_add_test(test_dtype SOURCES tests/unit/test_dtype.c LIBS gantry_gguf gantry_testutil TIMEOUT 120)
gt_add_test(test_gguf SOURCES tests/unit/test_gguf.c LIBS gantry_gguf gantry_testutil TIMEOUT 120)
gt_add_test(test_dtype_rows SOURCES tests/unit/test_dtype_rows.c LIBS gantry_gguf gantry_testutil TIMEOUT 120)

# Throughput of dt_dot_row per type (a bench, not a test: prints numbers).
add_executable(dtype-bench tools/bench/gguf_dtype_bench.c)
target_link_libraries(dtype-bench PRIVATE gantry_gguf)

# libFuzzer harness (tests/fuzz/README.md): configure with CC=clang -DGANTRY_FUZZ=ON.
if(GANTRY_FUZZ)
  if(CMAKE_C_COMPILER_ID MATCHES "Clang")
    add_executable(fuzz_gguf tests/fuzz/fuzz_gguf.c format/dtype.c format/gguf.c)
    target_compile_options(fuzz_gguf PRIVATE -g -O1 -fno-omit-frame-pointer
                           -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all)
    target_link_options(fuzz_gguf PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_libraries(fuzz_gguf PRIVATE gantry_common m)
  else()
    message(WARNING "GANTRY_FUZZ needs clang (CC=clang); fuzz_gguf not built")
  endif()
endif()
