# gantry-router: OpenAI HTTP gateway + gRPC front over Redis admission and an engine pool.
#   gantry_sha256      : common/sha256.c (API keys are stored as SHA-256 digests)
#   gantry_router_core : OpenAI JSON <-> engine proto (no I/O)
add_library(gantry_sha256 STATIC common/sha256.c)
gt_add_test(test_router_sha256 SOURCES tests/unit/test_router_sha256.c LIBS gantry_sha256 TIMEOUT 60)

add_library(gantry_router_core STATIC router/openai_req.c router/openai_resp.c router/openai_size.c router/openai_embed.c router/openai_responses_req.c
  router/openai_responses_resp.c)
target_link_libraries(gantry_router_core PUBLIC gantry_proto gantry_common PkgConfig::JANSSON)
gt_add_test(test_router_openai SOURCES tests/unit/test_router_openai.c
  LIBS gantry_router_core gantry_grpc TIMEOUT 60)
gt_add_test(test_router_responses SOURCES tests/unit/test_router_responses.c
  LIBS gantry_router_core gantry_grpc TIMEOUT 60)
gt_add_test(test_router_embed SOURCES tests/unit/test_router_embed.c
  LIBS gantry_router_core gantry_grpc TIMEOUT 60)

gt_protoc_c(GANTRY_ROUTER_PROTO_SRCS protos/gantry/v1/router.proto)
add_library(gantry_router_proto STATIC ${GANTRY_ROUTER_PROTO_SRCS})
target_include_directories(gantry_router_proto PUBLIC ${GANTRY_PROTO_GEN_DIR})
target_link_libraries(gantry_router_proto PUBLIC gantry_proto)
target_compile_options(gantry_router_proto PRIVATE -Wno-error -w)

add_library(gantry_router_rt STATIC router/mailbox.c router/pool.c router/router.c router/dataguard.c router/rq.c router/auth.c
  router/metrics.c router/config.c router/http.c router/http_errpage.c router/http_guard.c router/req_limits.c router/grpc_front.c router/registry.c
  router/register_cmd.c router/responses_store.c)
target_link_libraries(gantry_router_rt PUBLIC gantry_router_core gantry_router_proto gantry_admission
  gantry_grpc gantry_sha256 PkgConfig::LIBEVENT)

gt_add_test(test_router_nodelay SOURCES tests/unit/test_router_nodelay.c LIBS gantry_router_rt TIMEOUT 60)

add_executable(gantry-router router/main.c)
target_link_libraries(gantry-router PRIVATE gantry_router_rt)
target_compile_definitions(gantry-router PRIVATE GANTRY_VERSION="${PROJECT_VERSION}")
target_compile_definitions(gantry_router_rt PRIVATE GANTRY_VERSION="${PROJECT_VERSION}") # GET /version

# Integration tests: real redis-server, the gantry-router binary, scripted fake engines.
pkg_check_modules(CURL REQUIRED IMPORTED_TARGET libcurl)
add_library(gantry_router_harness STATIC tests/integration/router_harness.c)
target_link_libraries(gantry_router_harness PUBLIC gantry_grpc gantry_test_redis PkgConfig::CURL)
gt_add_test(test_router_http SOURCES tests/integration/test_router_http.c
  LIBS gantry_router_harness gantry_test_redis gantry_sha256 PkgConfig::HIREDIS TIMEOUT 120)
add_dependencies(test_router_http gantry-router)
add_executable(gantry-fake-engine tests/integration/fake_engine_main.c)
target_link_libraries(gantry-fake-engine PRIVATE gantry_router_harness)

# End to end with the official `openai` npm client and @grpc/grpc-js (tests/e2e/run.sh installs
# tests/e2e/node_modules when missing; exit 77 = skipped: no node, offline, or no `serve`).
#   test_router_e2e_fake : router + the scripted fake engine (tool calls, reasoning, failures)
#   test_router_e2e      : router + `gantry-engine serve` on the CPU (tests/golden/qwen3-tiny)
foreach(kind fake real)
  if(kind STREQUAL "fake")
    set(tname test_router_e2e_fake)
  else()
    set(tname test_router_e2e)
  endif()
  add_test(NAME ${tname} COMMAND bash ${CMAKE_SOURCE_DIR}/tests/e2e/run.sh ${kind})
  set_tests_properties(${tname} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "e2e"
    ENVIRONMENT "GANTRY_GOLDEN=${GANTRY_GOLDEN};GANTRY_BIN=${CMAKE_BINARY_DIR};GANTRY_SRC=${CMAKE_SOURCE_DIR}")
endforeach()
# router + `gantry-engine serve --tp 2` (two CPU ranks) on qwen3-tiny: one greedy completion with
# logprobs through the `openai` client equals the one-rank text (tests/e2e/tp.test.mjs)
add_test(NAME test_router_e2e_tp2 COMMAND bash ${CMAKE_SOURCE_DIR}/tests/e2e/run.sh real tp.test.mjs)
set_tests_properties(test_router_e2e_tp2 PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "e2e"
  ENVIRONMENT "GANTRY_GOLDEN=${GANTRY_GOLDEN};GANTRY_BIN=${CMAKE_BINARY_DIR};GANTRY_SRC=${CMAKE_SOURCE_DIR};GANTRY_ENGINE_TP=2")
# router + `gantry-engine serve --task embed` on an embedding copy of qwen3-tiny: /v1/embeddings through the
# `openai` client (plain, batched, dimensions, base64, token ids, errors) and LangChain's OpenAIEmbeddings;
# Router.Embed on the gRPC front equals the HTTP route (grpc_embed.test.mjs)
add_test(NAME test_router_e2e_embed COMMAND bash ${CMAKE_SOURCE_DIR}/tests/e2e/run.sh real embeddings.test.mjs grpc_embed.test.mjs)
set_tests_properties(test_router_e2e_embed PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "e2e"
  ENVIRONMENT "GANTRY_GOLDEN=${GANTRY_GOLDEN};GANTRY_BIN=${CMAKE_BINARY_DIR};GANTRY_SRC=${CMAKE_SOURCE_DIR};GANTRY_ENGINE_TASK=embed")
# a cancelled Embed (HTTP client gone, gRPC deadline) stops on the engine: a stack of its own, so that no
# other test's requests show in the engine's running / waiting gauges it reads (embed_cancel.test.mjs)
add_test(NAME test_router_e2e_embed_cancel COMMAND bash ${CMAKE_SOURCE_DIR}/tests/e2e/run.sh real embed_cancel.test.mjs)
set_tests_properties(test_router_e2e_embed_cancel PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "e2e"
  ENVIRONMENT "GANTRY_GOLDEN=${GANTRY_GOLDEN};GANTRY_BIN=${CMAKE_BINARY_DIR};GANTRY_SRC=${CMAKE_SOURCE_DIR};GANTRY_ENGINE_TASK=embed")
# the structured-output tests of openai.test.mjs, responses.test.mjs and clients.test.mjs on the demo model
# (it only writes Python)
add_test(NAME test_router_e2e_demo COMMAND bash ${CMAKE_SOURCE_DIR}/tests/e2e/run.sh real ${CMAKE_SOURCE_DIR}/tests/e2e/openai.test.mjs
  ${CMAKE_SOURCE_DIR}/tests/e2e/responses.test.mjs ${CMAKE_SOURCE_DIR}/tests/e2e/clients.test.mjs)
set_tests_properties(test_router_e2e_demo PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77 LABELS "e2e"
  ENVIRONMENT "GANTRY_GOLDEN=${GANTRY_GOLDEN};GANTRY_BIN=${CMAKE_BINARY_DIR};GANTRY_SRC=${CMAKE_SOURCE_DIR};GANTRY_E2E_MODEL=${CMAKE_SOURCE_DIR}/tests/golden/demo/gantry-demo-code-22m.Q4_K_M.gguf;GANTRY_E2E_TEST_ARGS=--test-name-pattern=structured")
gt_add_test(test_router_caps SOURCES tests/integration/test_router_caps.c
  LIBS gantry_router_harness gantry_test_redis gantry_sha256 PkgConfig::HIREDIS TIMEOUT 120)
add_dependencies(test_router_caps gantry-router)
gt_add_test(test_router_fault SOURCES tests/fault/test_router_fault.c
  LIBS gantry_router_harness gantry_test_redis PkgConfig::HIREDIS TIMEOUT 180)
add_dependencies(test_router_fault gantry-router gantry-fake-engine)
gt_add_test(test_router_failover SOURCES tests/fault/test_router_failover.c
  LIBS gantry_router_harness gantry_test_redis gantry_sha256 PkgConfig::HIREDIS TIMEOUT 180)
add_dependencies(test_router_failover gantry-router)

# Benchmark (prints numbers; not a test): router-bench [--engine HOST:PORT]
add_executable(router-bench tests/bench/router_bench.c)
target_link_libraries(router-bench PRIVATE gantry_router_harness gantry_test_redis)
gt_add_test(test_router_auth SOURCES tests/integration/test_router_auth.c
  LIBS gantry_router_harness gantry_test_redis gantry_sha256 PkgConfig::HIREDIS TIMEOUT 120)
add_dependencies(test_router_auth gantry-router)
gt_add_test(test_router_responses_store SOURCES tests/integration/test_router_responses.c
  LIBS gantry_router_harness gantry_test_redis gantry_sha256 PkgConfig::HIREDIS PkgConfig::JANSSON TIMEOUT 120)
add_dependencies(test_router_responses_store gantry-router)
gt_add_test(test_router_flow SOURCES tests/integration/test_router_flow.c
  LIBS gantry_router_harness gantry_router_proto gantry_test_redis TIMEOUT 120)
add_dependencies(test_router_flow gantry-router)
gt_add_test(test_router_limits SOURCES tests/integration/test_router_limits.c
  LIBS gantry_router_harness gantry_router_proto gantry_test_redis gantry_sha256 PkgConfig::HIREDIS TIMEOUT 120)
add_dependencies(test_router_limits gantry-router gantry)
# the router in the test process (its loop held inside a mailbox item), stopped with gRPC-front
# hand-offs still queued, or with an admin call waiting on a stopped Redis; meant for the ASan
# build too
gt_add_test(test_router_stop SOURCES tests/integration/test_router_stop.c
  LIBS gantry_router_rt gantry_router_harness gantry_test_redis PkgConfig::HIREDIS TIMEOUT 120)
# slow and hostile HTTP clients: deadlines, header limits, framing, connection caps, EMFILE
gt_add_test(test_router_guard SOURCES tests/integration/test_router_guard.c
  LIBS gantry_router_harness gantry_test_redis TIMEOUT 180)
add_dependencies(test_router_guard gantry-router)
# the closed engine port: loopback defaults, the shared token and mutual TLS between router and
# `gantry-engine serve` (accept and refuse paths)
gt_add_test(test_engine_auth SOURCES tests/integration/test_engine_auth.c
  LIBS gantry_router_harness gantry_test_redis TIMEOUT 240)
add_dependencies(test_engine_auth gantry-router gantry-engine)
# router RSS per request (real engine + the fake one): no whole-response copies in a stream, non-streaming
# bodies kept as text, --max-response-bytes (refused at admission, cancelled past it)
gt_add_test(test_router_memory SOURCES tests/integration/test_router_memory.c
  LIBS gantry_router_harness gantry_test_redis TIMEOUT 240)
add_dependencies(test_router_memory gantry-router gantry-engine)
