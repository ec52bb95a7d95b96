# clients/: the `gantry` CLI (bench, chat, limits, queues, health, models, tokenize, check) and its
# scripted SSE test server.
pkg_check_modules(GC_CURL REQUIRED IMPORTED_TARGET libcurl)

add_library(gantry_client STATIC
  clients/sse.c clients/req.c clients/http.c clients/bench_run.c clients/bench_stats.c
  clients/bench_out.c clients/bench_prompt.c clients/bench_slo.c clients/bench_dataset.c clients/bench_srvq.c clients/svg.c)
target_link_libraries(gantry_client PUBLIC gantry_common PkgConfig::GC_CURL PkgConfig::JANSSON m)
# --tokenizer M.gguf: local token counts through format/tokenizer.h when gantry_tok is built.
if(TARGET gantry_tok)
  target_sources(gantry_client PRIVATE clients/tok_local.c)
  target_link_libraries(gantry_client PUBLIC gantry_tok)
  target_compile_definitions(gantry_client PUBLIC GANTRY_HAVE_TOK=1)
endif()

add_executable(gantry clients/main.c clients/cmd_bench.c clients/cmd_chat.c clients/cmd_limits.c
  clients/cmd_health.c clients/cmd_models.c clients/cmd_check.c clients/cmd_tokenize.c)
target_link_libraries(gantry PRIVATE gantry_client)
target_compile_definitions(gantry PRIVATE GANTRY_VERSION="${PROJECT_VERSION}")

# Scripted HTTP/SSE server for measurement tests (library for in-process use + a program).
add_library(gantry_sse_server STATIC tests/sse_server/sse_server.c)
target_link_libraries(gantry_sse_server PUBLIC gantry_common PkgConfig::JANSSON Threads::Threads)
add_executable(gantry-sse-server tests/sse_server/main.c)
target_link_libraries(gantry-sse-server PRIVATE gantry_sse_server)

gt_add_test(test_bench_measure SOURCES tests/unit/test_bench_measure.c
  LIBS gantry_client gantry_sse_server TIMEOUT 120)
gt_add_test(test_bench_parse SOURCES tests/unit/test_bench_parse.c LIBS gantry_client gantry_testutil TIMEOUT 60)
gt_add_test(test_bench_cli SOURCES tests/unit/test_bench_cli.c
  LIBS gantry_sse_server gantry_testutil gantry_common TIMEOUT 120)
add_dependencies(test_bench_cli gantry)
# Needs a running router + CPU engine (GANTRY_ROUTER_URL); skipped (exit 77) without one.
gt_add_test(test_bench_real SOURCES tests/integration/test_bench_real.c
  LIBS gantry_testutil LABELS integration TIMEOUT 600)
add_dependencies(test_bench_real gantry)
set_tests_properties(test_bench_real PROPERTIES SKIP_RETURN_CODE 77)

# the same test against a live stack (redis + gantry-engine serve with the demo model + router)
add_test(NAME test_bench_real_stack
  COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/serve_demo.sh ${CMAKE_BINARY_DIR} -- $<TARGET_FILE:test_bench_real>)
set_tests_properties(test_bench_real_stack PROPERTIES TIMEOUT 600 LABELS integration
  ENVIRONMENT "GANTRY_GOLDEN=${GANTRY_GOLDEN};GANTRY_BIN=${CMAKE_BINARY_DIR};OMP_WAIT_POLICY=passive")
