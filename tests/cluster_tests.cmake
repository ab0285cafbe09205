# Cluster-mode tests (--hosts over ssh), included from tests/CMakeLists.txt.

add_executable(cluster_unit_tests
  unit/cluster/test_cluster_report.cpp
  unit/cluster/test_host_list.cpp
  unit/cluster/test_session_protocol.cpp
  unit/cluster/test_slurm_broadcast.cpp
  unit/cluster/test_slurm_hostlist.cpp
  unit/cluster/test_tree.cpp)
target_link_libraries(cluster_unit_tests PRIVATE ddprun_test_main ddprun_test_support
  ddprun_cluster)
catch_discover_tests(cluster_unit_tests EXTRA_ARGS --warn NoTests TEST_PREFIX "unit: ")

# End to end over testing/local_ssh.sh (a stand-in for ssh that runs the remote command
# here): loopback addresses play the hosts.
add_executable(hosts_tests
  integration/test_hosts.cpp
  integration/test_staging.cpp)
target_link_libraries(hosts_tests PRIVATE ddprun_test_main ddprun_test_support)
target_compile_definitions(hosts_tests PRIVATE
  DDPRUN_BINARY="$<TARGET_FILE:ddprun>"
  DDPRUN_STORE_BINARY="$<TARGET_FILE:ddprun-store>"
  FAKE_WORKER_BINARY="$<TARGET_FILE:fake_worker>"
  LOCAL_SSH="${PROJECT_SOURCE_DIR}/testing/local_ssh.sh")
add_dependencies(hosts_tests ddprun ddprun-store fake_worker)
catch_discover_tests(hosts_tests EXTRA_ARGS --warn NoTests TEST_PREFIX "hosts: " PROPERTIES TIMEOUT 300)
