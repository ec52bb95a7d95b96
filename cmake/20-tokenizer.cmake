# format/ tokenizer: byte-level BPE (Qwen3 / Qwen3.5) from GGUF metadata.
add_library(gantry_tok STATIC
  format/tokenizer.c
  format/tok_bpe.c
  format/tok_pretok.c
  format/tok_stream.c
  format/tok_utf8.c
  format/tok_gguf.c
)
target_link_libraries(gantry_tok PUBLIC gantry_gguf gantry_common PkgConfig::PCRE2 PkgConfig::UTF8PROC Threads::Threads)

# Unit tests; the fuzz harness is linked in to replay tests/fuzz/regress/tokenizer/.
gt_add_test(test_tokenizer
  SOURCES tests/unit/test_tokenizer.c tests/fuzz/fuzz_tokenizer.c
  LIBS gantry_tok gantry_testutil PkgConfig::UTF8PROC
  TIMEOUT 120)

# Throughput benchmark (prints MB/s; not a test).
add_executable(tok-bench tests/bench/tok_bench.c)
target_link_libraries(tok-bench PRIVATE gantry_tok)

# libFuzzer harness (cmake -DGANTRY_FUZZ=ON -DCMAKE_C_COMPILER=clang): the tokenizer sources are
# compiled into it so that they carry coverage instrumentation. See tests/fuzz/README.md.
if(GANTRY_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(WARNING "GANTRY_FUZZ needs clang: fuzz_tokenizer not built")
  else()
    # The GGUF reader is compiled in too, for coverage of mode 4 (a GGUF file as input).
    add_executable(fuzz_tokenizer tests/fuzz/fuzz_tokenizer.c
      format/tokenizer.c format/tok_bpe.c format/tok_pretok.c format/tok_stream.c format/tok_utf8.c
      format/tok_gguf.c format/gguf.c format/dtype.c)
    target_compile_options(fuzz_tokenizer PRIVATE -g -O1 -fsanitize=fuzzer,address,undefined)
    target_link_options(fuzz_tokenizer PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_libraries(fuzz_tokenizer PRIVATE gantry_common PkgConfig::PCRE2 PkgConfig::UTF8PROC
      Threads::Threads m)
  endif()
endif()
