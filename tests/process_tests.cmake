# process/: the line splitter, console folding and program checks (unit); spawning, the process
# runner and the orphan guard with real processes (integration).
add_executable(process_unit_tests
  unit/process/test_console_fold.cpp
  unit/process/test_console_writer.cpp
  unit/process/test_line_splitter.cpp
  unit/process/test_oom.cpp
  unit/process/test_program_check.cpp
  unit/process/test_standby.cpp
  unit/process/test_thread_state.cpp)
target_link_libraries(process_unit_tests PRIVATE ddprun_test_main ddprun_test_support
  ddprun_process nlohmann_json::nlohmann_json)
catch_discover_tests(process_unit_tests EXTRA_ARGS --warn NoTests TEST_PREFIX "unit: ")

add_executable(runner_tests integration/test_process_runner.cpp integration/test_orphan_guard.cpp
  integration/test_spawn.cpp)
target_link_libraries(runner_tests PRIVATE
  ddprun_test_main ddprun_test_support ddprun_process ddprun_agent nlohmann_json::nlohmann_json)
target_compile_definitions(runner_tests PRIVATE
  FAKE_WORKER_BINARY="$<TARGET_FILE:fake_worker>")
add_dependencies(runner_tests fake_worker)
catch_discover_tests(runner_tests EXTRA_ARGS --warn NoTests TEST_PREFIX "runner: " PROPERTIES TIMEOUT 120)
