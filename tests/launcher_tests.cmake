# launcher/: the command line, Slurm's variables, the job report (unit); end-to-end tests of the
# ddprun binary, alone, elastic, in network namespaces, under Slurm and against a real etcd.

add_executable(launcher_unit_tests
  unit/launcher/test_cli.cpp
  unit/launcher/test_cli_abbreviations.cpp
  unit/launcher/test_cli_errors.cpp
  unit/launcher/test_cli_hosts.cpp
  unit/launcher/test_config_summary.cpp
  unit/launcher/test_job_report.cpp
  unit/launcher/test_log_dir.cpp
  unit/launcher/test_slurm.cpp
  unit/launcher/test_value_parsers.cpp)
target_link_libraries(launcher_unit_tests PRIVATE ddprun_test_main ddprun_launcher_lib
  ddprun_test_support)
catch_discover_tests(launcher_unit_tests EXTRA_ARGS --warn NoTests TEST_PREFIX "unit: ")

add_executable(launcher_tests
  integration/test_console.cpp
  integration/test_dry_run.cpp
  integration/test_hard_to_break.cpp
  integration/test_hang.cpp
  integration/test_launcher.cpp
  integration/test_node_check.cpp
  integration/test_placement.cpp
  integration/test_progress.cpp
  integration/test_security.cpp
  integration/test_torchrun_suite.cpp
  integration/test_warm_standby.cpp)
target_link_libraries(launcher_tests PRIVATE ddprun_test_main ddprun_test_support
  ddprun_store ddprun_topology ddprun_launcher_lib nlohmann_json::nlohmann_json)
target_compile_definitions(launcher_tests PRIVATE
  DDPRUN_BINARY="$<TARGET_FILE:ddprun>"
  DDPRUN_STORE_BINARY="$<TARGET_FILE:ddprun-store>"
  FAKE_WORKER_BINARY="$<TARGET_FILE:fake_worker>"
  TORCH_ALLREDUCE_SCRIPT="${CMAKE_CURRENT_SOURCE_DIR}/python/allreduce.py"
  TORCH_HANG_SCRIPT="${CMAKE_CURRENT_SOURCE_DIR}/python/hang.py"
  IDENTITY_PROBE_SCRIPT="${CMAKE_CURRENT_SOURCE_DIR}/python/identity_probe.py"
  LAUNCHER_CASES_SCRIPT="${CMAKE_CURRENT_SOURCE_DIR}/python/launcher_cases.py"
  TOUCH_RANK_SCRIPT="${CMAKE_CURRENT_SOURCE_DIR}/python/touch_rank.sh"
  TOPOLOGY_FIXTURES="${CMAKE_CURRENT_SOURCE_DIR}/unit/topology/data")
add_dependencies(launcher_tests ddprun ddprun-store fake_worker)
catch_discover_tests(launcher_tests EXTRA_ARGS --warn NoTests TEST_PREFIX "ddprun: " PROPERTIES TIMEOUT 300)
# torchrun's launcher test cases again, their Python workers started from warm standbys.
catch_discover_tests(launcher_tests TEST_SPEC "[torchrun-suite][python]" EXTRA_ARGS --warn NoTests
  TEST_PREFIX "torchrun suite, warm standby: "
  PROPERTIES TIMEOUT 300 ENVIRONMENT "DDPRUN_SUITE_WARM_STANDBY=1")

add_executable(elastic_tests
  integration/test_elastic.cpp)
target_link_libraries(elastic_tests PRIVATE ddprun_test_main ddprun_test_support ddprun_common
  ddprun_store nlohmann_json::nlohmann_json)
target_compile_definitions(elastic_tests PRIVATE
  DDPRUN_BINARY="$<TARGET_FILE:ddprun>"
  DDPRUN_STORE_BINARY="$<TARGET_FILE:ddprun-store>")
add_dependencies(elastic_tests ddprun ddprun-store)
catch_discover_tests(elastic_tests EXTRA_ARGS --warn NoTests TEST_PREFIX "elastic: " PROPERTIES TIMEOUT 300)

# Elastic ddprun across network namespaces (root only; reported as skipped elsewhere).
add_test(NAME "netns: elastic job grows to 3 nodes and survives a node cut off"
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/netns/elastic_netns.sh $<TARGET_FILE:ddprun>)
set_tests_properties("netns: elastic job grows to 3 nodes and survives a node cut off"
  PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)

# --node-check's links across network namespaces, one node's link slowed with tc (root only;
# reported as skipped elsewhere). scripts/bench.sh runs it 20 times for the record.
add_test(NAME "netns: --node-check names the node whose link tc slowed, nothing when none is, and exclude leaves it out"
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/netns/node_check_links.sh $<TARGET_FILE:ddprun>)
set_tests_properties("netns: --node-check names the node whose link tc slowed, nothing when none is, and exclude leaves it out"
  PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)

# ddprun --hosts over real OpenSSH servers in network namespaces (root and sshd only; reported as
# skipped elsewhere).
add_test(NAME "netns: --hosts over ssh: ranks, exit codes, signals, unreachable hosts, output"
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/netns/ssh_hosts.sh $<TARGET_FILE:ddprun>
    $<TARGET_FILE:fake_worker>)
set_tests_properties("netns: --hosts over ssh: ranks, exit codes, signals, unreachable hosts, output"
  PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)

# The fault matrix's smoke subset (scripts/faults.sh --smoke): a few faults once each, every
# expected outcome checked; the full matrix is a script people run (docs/reliability.md).
add_test(NAME "faults: smoke subset of the fault matrix"
  COMMAND ${PROJECT_SOURCE_DIR}/scripts/faults.sh --smoke --build ${CMAKE_BINARY_DIR})
set_tests_properties("faults: smoke subset of the fault matrix" PROPERTIES TIMEOUT 300)

# The etcd backend against a real etcd cluster on loopback (Debian's etcd-server; reported as
# skipped, exit 77, where it is not installed).
add_executable(etcd_tests
  integration/test_etcd_store.cpp
  integration/test_etcd_rendezvous.cpp)
target_link_libraries(etcd_tests PRIVATE ddprun_test_main ddprun_test_support
  ddprun_testing_etcd nlohmann_json::nlohmann_json)
target_compile_definitions(etcd_tests PRIVATE DDPRUN_BINARY="$<TARGET_FILE:ddprun>")
add_dependencies(etcd_tests ddprun)
catch_discover_tests(etcd_tests EXTRA_ARGS --warn NoTests TEST_PREFIX "etcd: "
  PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)

# ddprun under a real Slurm (slurmctld, slurmd, munge) in network namespaces: srun with no
# rendezvous flags, --hosts=slurm in an sbatch script, exit codes, scancel (root and Slurm only;
# reported as skipped elsewhere).
add_test(NAME "netns: Slurm: srun ddprun, --hosts=slurm, exit codes, scancel"
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/netns/slurm.sh $<TARGET_FILE:ddprun>)
set_tests_properties("netns: Slurm: srun ddprun, --hosts=slurm, exit codes, scancel"
  PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)

# ddprun with no flags in a Kubeflow PyTorchJob's and a TrainJob's pod environment (PET_* only),
# each pod with its own /etc/hosts, the master's name resolving late (on node 0 too); exit codes
# (root only; reported as skipped elsewhere). docs/kubernetes.md.
add_test(NAME "netns: Kubernetes: PyTorchJob and TrainJob pod environments, no flags, a master name that resolves late, exit codes"
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/netns/kubernetes.sh $<TARGET_FILE:ddprun>)
set_tests_properties("netns: Kubernetes: PyTorchJob and TrainJob pod environments, no flags, a master name that resolves late, exit codes"
  PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)

# `ddprun status` and the metrics against real agents, a real etcd (skipped without it), a real
# Prometheus server and tmux (tests/netns/status_prometheus.sh, skipped without them).
add_executable(status_tests
  integration/test_status.cpp)
target_link_libraries(status_tests PRIVATE ddprun_test_main ddprun_test_support
  ddprun_testing_etcd nlohmann_json::nlohmann_json)
target_compile_definitions(status_tests PRIVATE DDPRUN_BINARY="$<TARGET_FILE:ddprun>")
add_dependencies(status_tests ddprun)
catch_discover_tests(status_tests EXTRA_ARGS --warn NoTests TEST_PREFIX "status: " PROPERTIES TIMEOUT 300)
