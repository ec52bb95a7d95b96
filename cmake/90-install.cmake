# `cmake --install <build> [--prefix P]`: the programs into P/bin and the systemd units into
# P/share/gantry/systemd (copy them to /etc/systemd/system; they run P/bin programs, by default
# /usr/local/bin). Targets are referred to by name; tests/deploy/install_check.sh installs into
# a temporary prefix and runs every installed program (test_install).
include(GNUInstallDirs)
set(GANTRY_INSTALL_PROGRAMS gantry-engine gantry-router gantry gantry-quantize gantry-mkmodel)
foreach(t ${GANTRY_INSTALL_PROGRAMS})
  if(TARGET ${t})
    install(TARGETS ${t} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endforeach()
if(TARGET gantry-engine)
  target_compile_definitions(gantry-engine PRIVATE GANTRY_VERSION="${PROJECT_VERSION}")
endif()
install(DIRECTORY ${CMAKE_SOURCE_DIR}/docker/systemd/ DESTINATION ${CMAKE_INSTALL_DATADIR}/gantry/systemd
        FILES_MATCHING PATTERN "*.service")

# Deployment checks (scripts under tests/deploy; exit 77 = skipped when a tool is missing)
add_test(NAME test_install COMMAND bash ${CMAKE_SOURCE_DIR}/tests/deploy/install_check.sh ${CMAKE_BINARY_DIR})
add_test(NAME test_systemd_units COMMAND bash ${CMAKE_SOURCE_DIR}/tests/deploy/systemd_verify.sh ${CMAKE_BINARY_DIR})
add_test(NAME test_docker_runtime_deps COMMAND bash ${CMAKE_SOURCE_DIR}/tests/deploy/docker_runtime_deps.sh ${CMAKE_BINARY_DIR})
set_tests_properties(test_install test_systemd_units test_docker_runtime_deps PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
