# Router admission control (Redis): library gantry_admission, its tests and adm-bench.
# This file has two modes: included by CMakeLists.txt it defines targets; run as
# `cmake -DLUA_DIR=.. -DOUT=.. -P 52-admission.cmake` it embeds the Lua scripts into a C file.
if(CMAKE_SCRIPT_MODE_FILE)
  file(GLOB lua_files ${LUA_DIR}/*.lua)
  list(SORT lua_files)
  set(src "/* Generated from the Lua files in router/admission_lua/ by cmake/52-admission.cmake. */\n")
  foreach(f ${lua_files})
    get_filename_component(n ${f} NAME_WE)
    file(READ ${f} hex HEX)
    string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," hex "${hex}")
    string(APPEND src "const char adm_lua_${n}[] = {${hex}0x00};\n")
  endforeach()
  file(WRITE ${OUT}.tmp "${src}")
  file(RENAME ${OUT}.tmp ${OUT})
  return()
endif()

pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
pkg_check_modules(LIBEVENT REQUIRED IMPORTED_TARGET libevent)

file(GLOB ADM_LUA CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/router/admission_lua/*.lua)
set(ADM_LUA_C ${CMAKE_BINARY_DIR}/router/admission_lua.c)
add_custom_command(OUTPUT ${ADM_LUA_C}
  COMMAND ${CMAKE_COMMAND} -DLUA_DIR=${CMAKE_SOURCE_DIR}/router/admission_lua -DOUT=${ADM_LUA_C}
          -P ${CMAKE_CURRENT_LIST_FILE}
  DEPENDS ${ADM_LUA} ${CMAKE_CURRENT_LIST_FILE}
  COMMENT "Embedding admission Lua scripts")

add_library(gantry_admission STATIC router/admission.c router/admission_table.c
  router/admission_request.c router/admission_tickets.c router/admission_recovery.c
  router/admission_ops.c router/redis_conn.c router/redis_sentinel.c ${ADM_LUA_C})
target_link_libraries(gantry_admission PUBLIC gantry_common PkgConfig::HIREDIS PkgConfig::LIBEVENT PkgConfig::JANSSON)

# Test helper: a real redis-server on a free loopback port.
add_library(gantry_test_redis STATIC tests/common/redis_server.c)
target_link_libraries(gantry_test_redis PUBLIC gantry_common PkgConfig::HIREDIS)

gt_add_test(test_admission SOURCES tests/unit/test_admission.c
  LIBS gantry_admission gantry_test_redis gantry_testutil TIMEOUT 120)
gt_add_test(test_admission_fault SOURCES tests/unit/test_admission_fault.c
  LIBS gantry_admission gantry_test_redis gantry_testutil TIMEOUT 120)

add_executable(adm-bench router/admission_bench.c)
target_link_libraries(adm-bench PRIVATE gantry_admission gantry_test_redis)

gt_add_test(test_redis_failover SOURCES tests/integration/test_redis_failover.c
  LIBS gantry_admission gantry_test_redis gantry_testutil TIMEOUT 180)
