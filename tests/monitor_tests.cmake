# monitor/: the records, the job's view, the table and the metrics text (unit); when the status
# publisher writes; the status server on real sockets.
add_executable(monitor_unit_tests
  unit/monitor/test_job_view.cpp
  unit/monitor/test_status_publisher.cpp
  unit/monitor/test_status_server.cpp)
target_link_libraries(monitor_unit_tests PRIVATE ddprun_test_main ddprun_test_support ddprun_monitor)
catch_discover_tests(monitor_unit_tests EXTRA_ARGS --warn NoTests TEST_PREFIX "unit: ")
