# gantry-engine serve: prompt building (engine/chat/prompt.c, shared with the CLI), the gRPC Engine
# service and its metrics (engine/server/).
add_library(gantry_prompt STATIC engine/chat/prompt.c)
target_link_libraries(gantry_prompt PUBLIC gantry_tok gantry_chat gantry_gguf gantry_common)
gt_add_test(test_prompt SOURCES tests/unit/test_prompt.c LIBS gantry_prompt gantry_testutil TIMEOUT 60)

# Prometheus registry + /metrics listener (generic: the router uses it too)
add_library(gantry_metrics STATIC common/metrics.c)
target_link_libraries(gantry_metrics PUBLIC gantry_common Threads::Threads)

# the gantry.v1.Engine service over the scheduler
add_library(gantry_server STATIC engine/server/server.c engine/server/server_convert.c engine/server/server_embed.c engine/server/server_metrics.c)
target_link_libraries(gantry_server PUBLIC gantry_sched gantry_prompt gantry_grpc gantry_metrics gantry_common)


add_library(gantry_engine_fixture STATIC tests/integration/engine_fixture.c)
target_link_libraries(gantry_engine_fixture PUBLIC gantry_server gantry_testutil)
gt_add_test(test_engine_serve SOURCES tests/integration/test_engine_serve.c
  LIBS gantry_engine_fixture TIMEOUT 300)
gt_add_test(test_server_convert SOURCES tests/unit/test_server_convert.c
  LIBS gantry_server gantry_testutil TIMEOUT 60)
gt_add_test(test_engine_sigterm SOURCES tests/integration/test_engine_sigterm.c
  LIBS gantry_engine_fixture TIMEOUT 300)
add_dependencies(test_engine_sigterm gantry-engine)
# the Engine service over two CPU ranks (tensor parallelism): same tokens as one rank; a failing
# rank ends the request with an error, NOT_SERVING, on_fatal
gt_add_test(test_engine_tp SOURCES tests/integration/test_engine_tp.c
  LIBS gantry_engine_fixture TIMEOUT 300)
gt_add_test(test_engine_models SOURCES tests/integration/test_engine_models.c
  LIBS gantry_engine_fixture TIMEOUT 300)

# benchmark (prints numbers; not a test)
add_executable(engine-bench tests/bench/engine_bench.c)
target_link_libraries(engine-bench PRIVATE gantry_server)
