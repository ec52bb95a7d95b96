# common/: shared by engine, router and clients.
add_library(gantry_common STATIC common/err.c common/log.c)
target_link_libraries(gantry_common PUBLIC Threads::Threads m)
