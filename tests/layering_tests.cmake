# The order of the parts is held by the build (cmake/parts.cmake): a part that includes a header
# of a part it does not link fails to compile. Each test builds a one-line probe, linked like the
# lower part, that includes a header of a higher one, and passes when the compiler says it cannot
# find that header.
function(ddprun_layering_probe lower_target lower higher_header)
  set(probe layering_probe_${lower})
  add_library(${probe} OBJECT EXCLUDE_FROM_ALL layering/probe.cpp)
  target_link_libraries(${probe} PRIVATE ${lower_target})
  target_compile_definitions(${probe} PRIVATE PROBE_HEADER="${higher_header}")
  add_test(NAME "layers: ${lower}/ cannot include ${higher_header}"
    COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target ${probe})
  # One at a time: each builds in the shared tree, and two that both relink a library it
  # depends on (the version changed) would spoil each other's.
  set_tests_properties("layers: ${lower}/ cannot include ${higher_header}" PROPERTIES
    PASS_REGULAR_EXPRESSION "${higher_header}: No such file or directory" TIMEOUT 120
    RESOURCE_LOCK ddprun_build_tree)
endfunction()

ddprun_layering_probe(ddprun_common common store/store.hpp)
ddprun_layering_probe(ddprun_store store rendezvous/rendezvous_handler.hpp)
ddprun_layering_probe(ddprun_etcd etcd rendezvous/rendezvous_handler.hpp)
ddprun_layering_probe(ddprun_process process agent/agent.hpp)
ddprun_layering_probe(ddprun_rendezvous rendezvous process/process_runner.hpp)
ddprun_layering_probe(ddprun_topology topology agent/agent.hpp)
ddprun_layering_probe(ddprun_agent agent cluster/head.hpp)
ddprun_layering_probe(ddprun_cluster cluster launcher/cli.hpp)
if(TARGET ddp_worker_base)
  ddprun_layering_probe(ddp_worker_base workers store/store.hpp)
endif()
ddprun_layering_probe(ddprun_monitor monitor cluster/head.hpp)
