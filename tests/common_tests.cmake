# common/: random numbers, the exception-to-exit-code table, tree removal, Python's templates.
add_executable(common_unit_tests
  unit/common/test_exit_codes.cpp
  unit/common/test_python_template.cpp
  unit/common/test_random.cpp
  unit/common/test_remove_tree.cpp)
target_link_libraries(common_unit_tests PRIVATE ddprun_test_main ddprun_test_support ddprun_common)
catch_discover_tests(common_unit_tests EXTRA_ARGS --warn NoTests TEST_PREFIX "unit: ")
