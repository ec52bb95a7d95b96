# grpc.health.v1 (the standard gRPC health protocol) for the engine's gRPC server: Kubernetes
# gRPC probes. Generated like gantry_proto (cmake/50-grpc.cmake), linked into gantry_server.
gt_protoc_c(GANTRY_HEALTH_PROTO_SRCS protos/grpc/health/v1/health.proto)
add_library(gantry_health_proto STATIC ${GANTRY_HEALTH_PROTO_SRCS})
target_include_directories(gantry_health_proto PUBLIC ${GANTRY_PROTO_GEN_DIR})
target_link_libraries(gantry_health_proto PUBLIC PkgConfig::PROTOBUF_C)
target_compile_options(gantry_health_proto PRIVATE -Wno-error -w)
target_link_libraries(gantry_server PUBLIC gantry_health_proto)
