# giant_add_test(NAME name SOURCES a.c b.c LABELS area [TIMEOUT s] [ARGS ...]
#                [LIBS ...] [RESOURCE_LOCK name])
# Builds a CMocka test program linked to libgiant and registers it with ctest.
# A test that exits 77 is reported as skipped (used when a device is absent).
function(giant_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT;RESOURCE_LOCK" "SOURCES;LABELS;ARGS;LIBS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  # The test's own libraries first: the static layers after them resolve what
  # they use (a static library satisfies only what comes before it).
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} giant_all PkgConfig::CMOCKA m)
  target_include_directories(${T_NAME} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/tests)
  giant_add_test_run(NAME ${T_NAME} PROGRAM ${T_NAME} ARGS ${T_ARGS} LABELS ${T_LABELS} TIMEOUT "${T_TIMEOUT}"
    RESOURCE_LOCK "${T_RESOURCE_LOCK}")
endfunction()

# giant_add_test_run(NAME name PROGRAM target LABELS area [TIMEOUT s]
#                    [ARGS ...] [RESOURCE_LOCK name])
# Registers a run of a test program giant_add_test built, under its own
# name: one program whose groups ctest schedules apart (ARGS picks one).
function(giant_add_test_run)
  cmake_parse_arguments(T "" "NAME;PROGRAM;TIMEOUT;RESOURCE_LOCK" "LABELS;ARGS" ${ARGN})
  if(NOT T_LABELS)
    message(FATAL_ERROR "test ${T_NAME} needs LABELS")
  endif()
  add_test(NAME ${T_NAME} COMMAND ${T_PROGRAM} ${T_ARGS})
  # One target per area, tests-<label>, builds its tests and what they run
  # (their add_dependencies), not the whole tree: `cmake --build B --target
  # tests-core && ctest -L core`.
  foreach(label ${T_LABELS})
    if(NOT TARGET tests-${label})
      add_custom_target(tests-${label})
    endif()
    add_dependencies(tests-${label} ${T_PROGRAM})
  endforeach()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
    SKIP_RETURN_CODE 77
    ENVIRONMENT "OMP_NUM_THREADS=2;GT_BUILD_DIR=${PROJECT_BINARY_DIR}")
  list(FIND GIANT_TEST_COSTS ${T_NAME} at)
  if(at GREATER -1)
    math(EXPR at "${at} + 1")
    list(GET GIANT_TEST_COSTS ${at} cost)
    set_tests_properties(${T_NAME} PROPERTIES COST ${cost})
  endif()
  if(T_RESOURCE_LOCK)
    set_tests_properties(${T_NAME} PROPERTIES RESOURCE_LOCK ${T_RESOURCE_LOCK})
  endif()
endfunction()
