# gantry-engine: the engine's command line (generate, eval, info, tokenize, detokenize).
add_executable(gantry-engine
  engine/cli/main.c
  engine/cli/cli.c
  engine/cli/cmd_generate.c
  engine/cli/cmd_eval.c
  engine/cli/cmd_info.c
  engine/cli/cmd_tokenize.c
  engine/cli/cmd_serve.c
  engine/cli/cmd_bench.c
)
target_link_libraries(gantry-engine PRIVATE gantry_server gantry_prompt gantry_model gantry_tok gantry_common)

gt_add_test(test_engine_cli SOURCES tests/integration/test_engine_cli.c LIBS gantry_testutil TIMEOUT 600)
add_dependencies(test_engine_cli gantry-engine gantry-mkmodel)
