# rendezvous/ and etcd/: the handlers over the in-memory store, the heartbeat ring, rank
# assignment, and the etcd client's pure parts (unit). The etcd store and rendezvous against a
# real etcd run in launcher_tests.cmake (etcd_tests), beside the ddprun binary they also start.
add_executable(rendezvous_unit_tests
  unit/etcd/test_etcd_client.cpp
  unit/rendezvous/test_elastic_rendezvous.cpp
  unit/rendezvous/test_heartbeat.cpp
  unit/rendezvous/test_rank_assignment.cpp
  unit/rendezvous/test_round_records.cpp
  unit/rendezvous/test_static_rendezvous.cpp)
target_link_libraries(rendezvous_unit_tests PRIVATE ddprun_test_main ddprun_test_support
  ddprun_rendezvous ddprun_etcd)
catch_discover_tests(rendezvous_unit_tests EXTRA_ARGS --warn NoTests TEST_PREFIX "unit: ")
