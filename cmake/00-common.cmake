# common/: shared by engine, router and clients.
add_library(gantry_common STATIC common/err.c common/fdlimit.c common/log.c common/strbuf.c common/utf8.c common/json_str.c)
target_link_libraries(gantry_common PUBLIC Threads::Threads m)

# the include arrows between module folders point down only (scripts/check_layout.sh)
add_test(NAME test_layout COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/check_layout.sh ${CMAKE_SOURCE_DIR})
set_tests_properties(test_layout PROPERTIES TIMEOUT 60)
# every kernel launched with programmatic dependent launch waits on its predecessor (kernels/common.cuh)
add_test(NAME test_pdl_contract COMMAND python3 ${CMAKE_SOURCE_DIR}/scripts/check_pdl.py ${CMAKE_SOURCE_DIR} --self-test)
set_tests_properties(test_pdl_contract PROPERTIES TIMEOUT 60)

gt_add_test(test_common_text SOURCES tests/unit/test_common_text.c LIBS gantry_common TIMEOUT 120)
