# Cluster-mode tests (--hosts over ssh), included from tests/CMakeLists.txt.

add_executable(cluster_unit_tests
  unit/cluster/test_host_list.cpp)
target_link_libraries(cluster_unit_tests PRIVATE ddprun_test_main ddprun_cluster)
catch_discover_tests(cluster_unit_tests TEST_PREFIX "unit: ")
