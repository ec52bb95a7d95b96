add_library(gantry_testutil STATIC tests/common/testutil.c)
target_link_libraries(gantry_testutil PUBLIC PkgConfig::JANSSON PkgConfig::CMOCKA m)
