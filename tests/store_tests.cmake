# store/: the codec, the server's state and handshake, the secret, the in-memory store (unit);
# the TCP server and client over real sockets, ddprun-store, and the workers' store with torch's
# own clients (integration); the fuzzers.
add_executable(store_unit_tests
  unit/store/test_memory_store.cpp
  unit/store/test_protocol.cpp
  unit/store/test_store_auth.cpp
  unit/store/test_store_handshake.cpp
  unit/store/test_store_state.cpp
  unit/store/test_torch_protocol.cpp)
target_link_libraries(store_unit_tests PRIVATE ddprun_test_main ddprun_test_support ddprun_store)
catch_discover_tests(store_unit_tests EXTRA_ARGS --warn NoTests TEST_PREFIX "unit: ")

add_executable(store_tests integration/test_tcp_store.cpp integration/test_torch_store.cpp)
target_link_libraries(store_tests PRIVATE ddprun_test_main ddprun_test_support ddprun_store)
target_compile_definitions(store_tests PRIVATE
  DDPRUN_STORE_BINARY="$<TARGET_FILE:ddprun-store>"
  TORCH_STORE_CLIENT_SCRIPT="${CMAKE_CURRENT_SOURCE_DIR}/python/torch_store_client.py"
  TORCH_ALLREDUCE_SCRIPT="${CMAKE_CURRENT_SOURCE_DIR}/python/allreduce.py")
add_dependencies(store_tests ddprun-store)
catch_discover_tests(store_tests EXTRA_ARGS --warn NoTests TEST_PREFIX "store: " PROPERTIES TIMEOUT 120)

# libFuzzer targets for the store codec and server (clang only): scripts/test.sh runs them briefly.
if(DDPRUN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "DDPRUN_FUZZ=ON needs clang (CXX=clang++)")
  endif()
  foreach(fuzzer fuzz_protocol fuzz_server fuzz_torch_protocol)
    add_executable(${fuzzer} fuzz/${fuzzer}.cpp)
    target_link_libraries(${fuzzer} PRIVATE ddprun_store)
    target_compile_options(${fuzzer} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_options(${fuzzer} PRIVATE -fsanitize=fuzzer,address,undefined)
  endforeach()
  add_executable(make_seeds fuzz/make_seeds.cpp)
  target_link_libraries(make_seeds PRIVATE ddprun_store)
endif()
