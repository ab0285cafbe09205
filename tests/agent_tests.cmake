# agent/: the agent's rounds on the in-memory store with a fake runner, and the workers'
# environment (unit). The rounds' results are checked as exit codes, which the launcher's
# job report gives them.
add_executable(agent_unit_tests
  unit/agent/test_agent.cpp
  unit/agent/test_file_timer.cpp
  unit/agent/test_gpu_check.cpp
  unit/agent/test_link_check.cpp
  unit/agent/test_node_check.cpp
  unit/agent/test_node_check_table.cpp
  unit/agent/test_rank_stacks.cpp
  unit/agent/test_stack_report.cpp
  unit/agent/test_status_board.cpp
  unit/agent/test_worker_env.cpp)
target_link_libraries(agent_unit_tests PRIVATE ddprun_test_main ddprun_test_support ddprun_agent
  ddprun_launcher_lib)
target_compile_definitions(agent_unit_tests PRIVATE
  STACK_FIXTURES="${CMAKE_CURRENT_SOURCE_DIR}/unit/agent/data")
catch_discover_tests(agent_unit_tests EXTRA_ARGS --warn NoTests TEST_PREFIX "unit: ")
