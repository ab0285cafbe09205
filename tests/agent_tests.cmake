# Agent tests, included from tests/CMakeLists.txt: the fake worker, unit tests for the agent's
# pure parts, and integration tests of the process runner with real processes.

# A worker with failure modes (FAKE_MODE or --mode=X); standard library and POSIX only.
add_executable(fake_worker fake_worker/fake_worker.cpp)
target_link_libraries(fake_worker PRIVATE ddprun_flags)

add_executable(agent_unit_tests
  unit/agent/test_agent.cpp
  unit/agent/test_job_report.cpp
  unit/agent/test_line_splitter.cpp
  unit/agent/test_program_check.cpp
  unit/agent/test_worker_env.cpp)
target_link_libraries(agent_unit_tests PRIVATE ddprun_test_main ddprun_test_support ddprun_agent
  ddprun_launcher_lib)
catch_discover_tests(agent_unit_tests TEST_PREFIX "unit: ")

add_executable(runner_tests integration/test_process_runner.cpp integration/test_spawn.cpp
  integration/test_remove_tree.cpp)
target_link_libraries(runner_tests PRIVATE
  ddprun_test_main ddprun_test_support ddprun_agent nlohmann_json::nlohmann_json)
target_compile_definitions(runner_tests PRIVATE
  FAKE_WORKER_BINARY="$<TARGET_FILE:fake_worker>")
add_dependencies(runner_tests fake_worker)
catch_discover_tests(runner_tests TEST_PREFIX "runner: " PROPERTIES TIMEOUT 120)
