# gRPC glue over the gRPC C core + protobuf-c code for protos/gantry/v1/*.proto.
#   gantry_proto : generated protobuf-c messages (headers as "gantry/v1/engine.pb-c.h")
#   gantry_grpc  : server/client glue (common/grpc_*.c) + Engine client (common/engine_client.c)
pkg_check_modules(GRPC REQUIRED IMPORTED_TARGET grpc)
pkg_check_modules(PROTOBUF_C REQUIRED IMPORTED_TARGET libprotobuf-c)
find_program(PROTOC_C_EXE NAMES protoc-c REQUIRED)   # standalone: does not need `protoc`

set(GANTRY_PROTO_GEN_DIR ${CMAKE_BINARY_DIR}/gen)

# gt_protoc_c(OUT_SRCS protos/gantry/v1/x.proto ...): generate <gen>/gantry/v1/x.pb-c.{c,h}
# at build time; appends the .c files to OUT_SRCS. Proto imports resolve against protos/.
function(gt_protoc_c out_srcs)
  set(srcs)
  foreach(p ${ARGN})
    file(RELATIVE_PATH rel ${CMAKE_SOURCE_DIR}/protos ${CMAKE_SOURCE_DIR}/${p})
    string(REGEX REPLACE "\\.proto$" "" stem ${rel})
    set(c ${GANTRY_PROTO_GEN_DIR}/${stem}.pb-c.c)
    set(h ${GANTRY_PROTO_GEN_DIR}/${stem}.pb-c.h)
    add_custom_command(OUTPUT ${c} ${h}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${GANTRY_PROTO_GEN_DIR}
      COMMAND ${PROTOC_C_EXE} --proto_path=${CMAKE_SOURCE_DIR}/protos
              --c_out=${GANTRY_PROTO_GEN_DIR} ${CMAKE_SOURCE_DIR}/${p}
      DEPENDS ${CMAKE_SOURCE_DIR}/${p}
      COMMENT "protoc-c ${rel}" VERBATIM)
    list(APPEND srcs ${c})
  endforeach()
  set(${out_srcs} ${${out_srcs}} ${srcs} PARENT_SCOPE)
endfunction()

gt_protoc_c(GANTRY_PROTO_SRCS protos/gantry/v1/engine.proto)
add_library(gantry_proto STATIC ${GANTRY_PROTO_SRCS})
target_include_directories(gantry_proto PUBLIC ${GANTRY_PROTO_GEN_DIR})
target_link_libraries(gantry_proto PUBLIC PkgConfig::PROTOBUF_C)
# generated code: not ours to keep warning-free under -Wextra -Werror
target_compile_options(gantry_proto PRIVATE -Wno-error -w)

add_library(gantry_grpc STATIC
  common/grpc_util.c
  common/grpc_server.c
  common/grpc_client.c
  common/grpc_creds.c
  common/grpc_delta.c
  common/engine_client.c)
target_link_libraries(gantry_grpc PUBLIC gantry_proto gantry_common PkgConfig::GRPC
  PkgConfig::PROTOBUF_C Threads::Threads)

gt_add_test(test_grpc_delta SOURCES tests/unit/test_grpc_delta.c LIBS gantry_grpc TIMEOUT 60)
gt_add_test(test_grpc_engine SOURCES tests/unit/test_grpc_engine.c
  LIBS gantry_grpc gantry_testutil TIMEOUT 120)
