# engine/grammar/: constrained decoding (JSON schema, json_object, choice, regex -> token masks).
add_library(gantry_grammar STATIC
  engine/grammar/gr_builder.c
  engine/grammar/gr_compile.c
  engine/grammar/gr_json.c
  engine/grammar/gr_regex.c
  engine/grammar/gr_vocab.c
  engine/grammar/gr_cache.c
  engine/grammar/gr_matcher.c
  engine/grammar/gr_range.c
)
target_link_libraries(gantry_grammar PUBLIC gantry_tok gantry_common PkgConfig::JANSSON)

gt_add_test(test_grammar SOURCES tests/unit/test_grammar.c LIBS gantry_grammar gantry_testutil TIMEOUT 120)
gt_add_test(test_grammar_vocab SOURCES tests/unit/test_grammar_vocab.c LIBS gantry_grammar gantry_testutil TIMEOUT 300)

# Per-token mask cost, cold and warm (prints a table; not a test): bench_grammar [GGUF]
add_executable(bench_grammar tools/bench/grammar_bench.c)
target_link_libraries(bench_grammar PRIVATE gantry_grammar)
