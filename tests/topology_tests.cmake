# topology/: hwloc's reading of described machines (XML and synthetic) and of this one, and the
# worker placement planned for every --numa-binding and --cpu-bind mode.

add_executable(topology_unit_tests
  unit/topology/test_placement_plan.cpp)
target_link_libraries(topology_unit_tests PRIVATE ddprun_test_main ddprun_topology)
target_compile_definitions(topology_unit_tests PRIVATE
  TOPOLOGY_FIXTURES="${CMAKE_CURRENT_SOURCE_DIR}/unit/topology/data")
catch_discover_tests(topology_unit_tests EXTRA_ARGS --warn NoTests TEST_PREFIX "unit: ")
