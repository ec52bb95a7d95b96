# gantry-engine: the engine's command line (generate, eval, info, tokenize, detokenize).
add_executable(gantry-engine
  engine/cli/main.c
  engine/cli/cli.c
  engine/cli/prompt.c
  engine/cli/cmd_generate.c
  engine/cli/cmd_eval.c
  engine/cli/cmd_info.c
  engine/cli/cmd_tokenize.c
)
target_link_libraries(gantry-engine PRIVATE gantry_model gantry_tok gantry_common)
